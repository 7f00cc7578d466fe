// Request parsing: good requests give typed fields; every bad input is a 400 naming its field, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "server/api_error.h"
#include "server/api_request.h"

namespace ds::server {
namespace {

ModelLimits limits() {
  return ModelLimits{{"tiny", "/models/tiny"}, 320};
}

ApiRequest chat(const std::string& body) {
  return parse_chat_request(body, limits());
}
ApiRequest completions(const std::string& body) {
  return parse_completions_request(body, limits());
}

TEST(ServerRequest, ChatFields) {
  ApiRequest r = chat(R"({"model": "tiny", "messages": [{"role": "system", "content": "s"},
      {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
      "max_completion_tokens": 7, "stop": "x", "temperature": 0, "top_k": 5, "top_p": 0.5, "min_p": 0.1,
      "seed": 42, "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
      "stream": true, "stream_options": {"include_usage": true}, "logprobs": true, "top_logprobs": 3,
      "chat_template_kwargs": {"enable_thinking": false}, "draft": false, "ignore_eos": true})");
  EXPECT_EQ(r.model, "tiny");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(r.sampling.temperature, 0);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_FLOAT_EQ(r.sampling.top_p, 0.5f);
  EXPECT_EQ(r.sampling.seed, 42u);
  EXPECT_TRUE(r.seed_given);
  EXPECT_FLOAT_EQ(r.sampling.repetition_penalty, 1.1f);
  EXPECT_TRUE(r.stream && r.include_usage && r.ignore_eos);
  EXPECT_FALSE(r.use_drafts);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
}

TEST(ServerRequest, ChatDefaultsAndToolMessages) {
  ApiRequest r = chat(R"({"messages": [{"role": "user", "content": "hi"},
      {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
        "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "2"}],
      "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}]})");
  EXPECT_EQ(r.model, "tiny");  // absent model: the served one
  EXPECT_EQ(r.max_tokens, -1);
  EXPECT_EQ(r.top_logprobs, -1);
  EXPECT_FALSE(r.seed_given);
  EXPECT_LT(r.sampling.seed, uint64_t{1} << 53);
  EXPECT_EQ(r.messages[1]["content"], "");  // templates want "", not null
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["arguments"]["x"], 1);
  EXPECT_TRUE(r.tools.is_array());
  EXPECT_TRUE(r.use_drafts);
}

TEST(ServerRequest, CompletionPrompts) {
  EXPECT_EQ(completions(R"({"model": "tiny", "prompt": "abc"})").prompt_text, "abc");
  EXPECT_EQ(completions(R"({"prompt": ["abc"]})").prompt_text, "abc");
  ApiRequest ids = completions(R"({"prompt": [1, 2, 319], "max_tokens": 3, "logprobs": 2, "echo": true})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 319}));
  EXPECT_EQ(ids.max_tokens, 3);
  EXPECT_EQ(ids.top_logprobs, 2);
  EXPECT_TRUE(ids.echo);
  EXPECT_EQ(completions(R"({"prompt": [[5, 6]]})").prompt_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(completions(R"({"prompt": "a"})").max_tokens, 16);
  EXPECT_EQ(completions(R"({"prompt": "a", "stop": ["x", "", "yz"]})").stop,
            (std::vector<std::string>{"x", "yz"}));
  EXPECT_EQ(completions(R"({"prompt": "a", "max_tokens": 4.0})").max_tokens, 4);
}

struct BadInput {
  const char* body;
  const char* param;     // the field the error must name
  const char* fragment;  // and a piece of its message
};

void expect_rejected(bool is_chat, const BadInput& bad) {
  SCOPED_TRACE(bad.body);
  try {
    is_chat ? chat(bad.body) : completions(bad.body);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.type, "invalid_request_error");
    EXPECT_EQ(e.param, bad.param);
    EXPECT_NE(std::string(e.what()).find(bad.fragment), std::string::npos) << e.what();
    std::string body = error_body(e);
    EXPECT_NE(body.find("\"invalid_request_error\""), std::string::npos);
  }
}

constexpr const char* kUser = R"("messages": [{"role": "user", "content": "hi"}])";

TEST(ServerRequest, ChatBadInputCatalogue) {
  const std::string u = kUser;
  const std::vector<std::pair<std::string, BadInput>> cases = {
      {"{", {nullptr, "", "not valid JSON"}},
      {"", {nullptr, "", "not valid JSON"}},
      {"[1]", {nullptr, "", "JSON object"}},
      {"{}", {nullptr, "messages", "required"}},
      {R"({"messages": "hi"})", {nullptr, "messages", "array"}},
      {R"({"messages": []})", {nullptr, "messages", "empty"}},
      {R"({"messages": [1]})", {nullptr, "messages[0]", "object"}},
      {R"({"messages": [{"content": "x"}]})", {nullptr, "messages[0].role", "string"}},
      {R"({"messages": [{"role": "robot", "content": "x"}]})", {nullptr, "messages[0].role", "robot"}},
      {R"({"messages": [{"role": "user"}]})", {nullptr, "messages[0].content", "required"}},
      {R"({"messages": [{"role": "user", "content": 5}]})", {nullptr, "messages[0].content", "string"}},
      {R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       {nullptr, "messages[0].content[0].type", "not supported"}},
      {R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
       {nullptr, "messages[0].content[0].text", "string"}},
      {R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]})",
       {nullptr, "messages[0].tool_calls[0].function.arguments", "valid JSON"}},
      {R"({"messages": [{"role": "user", "content": "x", "tool_calls": []}]})",
       {nullptr, "messages[0].tool_calls", "assistant"}},
      {"{" + u + R"(, "model": "gpt-4"})", {nullptr, "model", "gpt-4"}},
      {"{" + u + R"(, "model": 3})", {nullptr, "model", "string"}},
      {"{" + u + R"(, "n": 2})", {nullptr, "n", "must be 1"}},
      {"{" + u + R"(, "n": "1"})", {nullptr, "n", "integer"}},
      {"{" + u + R"(, "temperature": "hot"})", {nullptr, "temperature", "number"}},
      {"{" + u + R"(, "temperature": -1})", {nullptr, "temperature", ">= 0"}},
      {"{" + u + R"(, "top_p": 1.5})", {nullptr, "top_p", "(0, 1]"}},
      {"{" + u + R"(, "top_p": 0})", {nullptr, "top_p", "(0, 1]"}},
      {"{" + u + R"(, "temperature": 1e300})", {nullptr, "temperature", "finite number >= 0, got inf"}},
      {"{" + u + R"(, "repetition_penalty": -1e300})", {nullptr, "repetition_penalty", "got -inf"}},
      {"{" + u + R"(, "min_p": 2})", {nullptr, "min_p", "[0, 1]"}},
      {"{" + u + R"(, "top_k": -2})", {nullptr, "top_k", "[-1,"}},
      {"{" + u + R"(, "top_k": 1.5})", {nullptr, "top_k", "integer"}},
      {"{" + u + R"(, "presence_penalty": 3})", {nullptr, "presence_penalty", "[-2, 2]"}},
      {"{" + u + R"(, "frequency_penalty": -3})", {nullptr, "frequency_penalty", "[-2, 2]"}},
      {"{" + u + R"(, "repetition_penalty": 0})", {nullptr, "repetition_penalty", "> 0"}},
      {"{" + u + R"(, "seed": -1})", {nullptr, "seed", "[0,"}},
      {"{" + u + R"(, "seed": 18446744073709551615})", {nullptr, "seed", "at most"}},
      {"{" + u + R"(, "max_tokens": 0})", {nullptr, "max_tokens", "[1,"}},
      {"{" + u + R"(, "max_completion_tokens": 1e12})", {nullptr, "max_completion_tokens", "[1,"}},
      // Integers too large for 64 bits (read as floats) are out of range, not "not an integer".
      {"{" + u + R"(, "max_tokens": 1e30})",
       {nullptr, "max_tokens", "must be in [1, 2147483647], got 1e+30"}},
      {"{" + u + R"(, "max_tokens": 99999999999999999999})", {nullptr, "max_tokens", "must be in [1,"}},
      {"{" + u + R"(, "seed": -1e19})", {nullptr, "seed", "must be in [0,"}},
      {"{" + u + R"(, "top_k": 1.5e300})", {nullptr, "top_k", "must be in [-1,"}},
      // Bad UTF-8 in a string: the parser's reason and where.
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"h\xff\"}]}",
       {nullptr, "",
        "not valid JSON: parse error at line 1, column 45: syntax error while parsing value - invalid "
        "string: ill-formed UTF-8 byte"}},
      {"{\"messages\": [{\"role\": \"user\", \"content\": \"h\xc3\"}]}", {nullptr, "", "UTF-8"}},
      {"{" + u + R"(, "stop": 5})", {nullptr, "stop", "string"}},
      {"{" + u + R"(, "stop": ["a", 1]})", {nullptr, "stop", "string"}},
      {"{" + u + R"(, "stop_token_ids": [320]})", {nullptr, "stop_token_ids", "out of range"}},
      {"{" + u + R"(, "stream": "yes"})", {nullptr, "stream", "boolean"}},
      {"{" + u + R"(, "stream_options": {"include_usage": true}})", {nullptr, "stream_options", "stream"}},
      {"{" + u + R"(, "stream": true, "stream_options": {"include_usage": 1}})",
       {nullptr, "stream_options.include_usage", "boolean"}},
      {"{" + u + R"(, "logprobs": 1})", {nullptr, "logprobs", "boolean"}},
      {"{" + u + R"(, "logprobs": true, "top_logprobs": 21})", {nullptr, "top_logprobs", "[0, 20]"}},
      {"{" + u + R"(, "top_logprobs": 2})", {nullptr, "top_logprobs", "requires"}},
      {"{" + u + R"(, "chat_template_kwargs": {"enable_thinking": "no"}})",
       {nullptr, "chat_template_kwargs.enable_thinking", "boolean"}},
      {"{" + u + R"(, "chat_template_kwargs": []})", {nullptr, "chat_template_kwargs", "object"}},
      {"{" + u + R"(, "draft": 0})", {nullptr, "draft", "boolean"}},
      {"{" + u + R"(, "ignore_eos": null, "tools": {}})", {nullptr, "tools", "array"}},
      {"{" + u + R"(, "tools": [{"type": "function"}]})", {nullptr, "tools[0].function", "object"}},
      {"{" + u + R"(, "tool_choice": "required"})", {nullptr, "tool_choice", "needs 'tools'"}},
      {"{" + u + R"(, "tool_choice": "always", "tools": [{"type": "function", "function": {"name": "f"}}]})",
       {nullptr, "tool_choice", "\"required\""}},
      {"{" + u + R"(, "tool_choice": 3})", {nullptr, "tool_choice", "string or an object"}},
      {"{" + u + R"(, "tool_choice": {"type": "tool"}})", {nullptr, "tool_choice.type", "function"}},
      {"{" + u + R"(, "tool_choice": {"type": 5}})", {nullptr, "tool_choice.type", "function"}},
      {"{" + u + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}})",
       {nullptr, "tool_choice", "needs 'tools'"}},
      {"{" + u + R"(, "tool_choice": {"type": "function"}, "tools": [{"function": {"name": "f"}}]})",
       {nullptr, "tool_choice.function", "object"}},
      {"{" + u +
           R"(, "tool_choice": {"type": "function", "function": {"name": 1}}, "tools": [{"function": {"name": "f"}}]})",
       {nullptr, "tool_choice.function.name", "string"}},
      {"{" + u +
           R"(, "tool_choice": {"type": "function", "function": {"name": "g"}}, "tools": [{"function": {"name": "f"}}]})",
       {nullptr, "tool_choice.function.name", "'g', which is not among the functions in 'tools' ('f')"}},
      {"{" + u + R"(, "parallel_tool_calls": "no"})", {nullptr, "parallel_tool_calls", "boolean"}},
      {"{" + u + R"(, "response_format": {"type": "json_object"}})",
       {nullptr, "response_format", "not supported"}},
      {"{" + u + R"(, "guided_json": {}})", {nullptr, "guided_json", "not supported"}},
      {"{" + u + R"(, "guided_choice": ["a"]})", {nullptr, "guided_choice", "not supported"}},
      {"{" + u + R"(, "guided_grammar": "x"})", {nullptr, "guided_grammar", "not supported"}},
      {"{" + u + R"(, "response_format": {"type": "json_schema"}})",
       {nullptr, "response_format", "not supported"}},
      {"{" + u + R"(, "guided_regex": "a+"})", {nullptr, "guided_regex", "not supported"}},
      {"{" + u + R"(, "reasoning_effort": "max"})", {nullptr, "reasoning_effort", "low"}},
  };
  for (const auto& [body, bad] : cases) expect_rejected(true, {body.c_str(), bad.param, bad.fragment});
}

// A chat body offering two tools, plus `extra` fields.
ApiRequest chat_with_tools(const std::string& extra) {
  std::string body = "{";
  body += kUser;
  body += R"(, "tools": [{"type": "function", "function": {"name": "f"}},
      {"type": "function", "function": {"name": "get_weather"}}])";
  body += extra;
  body += "}";
  return chat(body);
}

TEST(ServerRequest, ToolChoiceForms) {
  ApiRequest a = chat_with_tools("");
  EXPECT_EQ(a.tool_choice, ToolChoice::Auto);
  EXPECT_TRUE(a.parallel_tool_calls);
  ApiRequest none = chat_with_tools(R"(, "tool_choice": "none")");
  EXPECT_EQ(none.tool_choice, ToolChoice::None);
  EXPECT_TRUE(none.tools.is_null());
  ApiRequest required = chat_with_tools(R"(, "tool_choice": "required", "parallel_tool_calls": false)");
  EXPECT_EQ(required.tool_choice, ToolChoice::Required);
  EXPECT_FALSE(required.parallel_tool_calls);
  ApiRequest named =
      chat_with_tools(R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})");
  EXPECT_EQ(named.tool_choice, ToolChoice::Named);
  EXPECT_EQ(named.tool_name, "get_weather");
}

TEST(ServerRequest, CompletionsBadInputCatalogue) {
  const std::vector<BadInput> cases = {
      {R"({})", "prompt", "required"},
      {R"({"prompt": 5})", "prompt", "string"},
      {R"({"prompt": []})", "prompt", "empty"},
      {R"({"prompt": ["a", "b"]})", "prompt", "batched"},
      {R"({"prompt": [[1], [2]]})", "prompt", "batched"},
      {R"({"prompt": [1, 320]})", "prompt", "out of range"},
      {R"({"prompt": [1, -1]})", "prompt", "out of range"},
      {R"({"prompt": [1, 99999999999999999999]})", "prompt", "integer"},
      {R"({"prompt": [1, "a"]})", "prompt", "integer"},
      {R"({"prompt": [1.5]})", "prompt", "integer"},
      {R"({"prompt": [true]})", "prompt", "string"},
      {R"({"prompt": "a", "logprobs": 21})", "logprobs", "[0, 20]"},
      {R"({"prompt": "a", "logprobs": true})", "logprobs", "integer"},
      {R"({"prompt": "a", "best_of": 2})", "best_of", "must be 1"},
      {R"({"prompt": "a", "n": 3})", "n", "must be 1"},
      {R"({"prompt": "a", "echo": "x"})", "echo", "boolean"},
      {R"({"prompt": "a", "model": "other"})", "model", "does not exist"},
      {R"({"prompt": "a", "suffix": "b"})", "suffix", "not supported"},
      {R"({"prompt": "a", "temperature": 1e400})", "", "not valid JSON: number overflow parsing '1e400'"},
  };
  for (const BadInput& bad : cases) expect_rejected(false, bad);
}

TEST(ServerRequest, UnknownModelCarriesCode) {
  try {
    completions(R"({"prompt": "a", "model": "x"})");
    FAIL();
  } catch (const ApiError& e) {
    EXPECT_EQ(e.code, "model_not_found");
    EXPECT_NE(error_body(e).find(R"("code":"model_not_found")"), std::string::npos);
  }
}

// Truncations of a valid request and bytes flipped in it are refused with a 400, never a crash.
TEST(ServerRequest, MangledBodiesNeverCrash) {
  const std::string good = R"({"model": "tiny", "messages": [{"role": "user", "content": [{"type": "text",
      "text": "h\u00e9"}]}], "stop": ["a"], "max_tokens": 3, "logprobs": true, "top_logprobs": 2, "seed": 1})";
  for (size_t cut = 0; cut <= good.size(); ++cut) {
    for (char flip : {'\0', '"', '[', '9', '\xff'}) {
      std::string body = good.substr(0, cut);
      if (cut < good.size()) body += flip + good.substr(cut + 1);
      try {
        chat(body);
      } catch (const ApiError& e) {
        EXPECT_EQ(e.status, 400);
      }
    }
  }
}

}  // namespace
}  // namespace ds::server
