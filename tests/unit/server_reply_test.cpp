// Reply assembly: stop strings across token boundaries, the reasoning split, tool calls, and the JSON shapes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/prompt_builder.h"
#include "server/reasoning_split.h"
#include "server/reply_state.h"
#include "server/response_json.h"
#include "server/stop_strings.h"
#include "server/tool_calls.h"

namespace ds::server {
namespace {

std::string run_stop(const std::vector<std::string>& stops, const std::vector<std::string>& pieces,
                     std::vector<std::string>* sent = nullptr) {
  StopStringFilter f(stops);
  std::string out;
  for (const std::string& p : pieces) {
    std::string s = f.push(p);
    if (sent) sent->push_back(s);
    out += s;
  }
  return out + f.flush();
}

TEST(ServerStopStrings, SplitAcrossPiecesIsHeldBack) {
  std::vector<std::string> sent;
  EXPECT_EQ(run_stop({"STOP"}, {"ab", "cS", "TO", "Pxyz"}, &sent), "abc");
  EXPECT_EQ(sent, (std::vector<std::string>{"ab", "c", "", ""}));
}

TEST(ServerStopStrings, FalseStartIsReleased) {
  std::vector<std::string> sent;
  EXPECT_EQ(run_stop({"STOP"}, {"aST", "x", "b"}, &sent), "aSTxb");
  EXPECT_EQ(sent, (std::vector<std::string>{"a", "STx", "b"}));
  EXPECT_EQ(run_stop({"STOP"}, {"aST"}), "aST");  // the reply ended: held text is no stop string
}

TEST(ServerStopStrings, EarliestOfSeveralAndNothingAfter) {
  StopStringFilter f({"world", "lo"});
  EXPECT_EQ(f.push("hello world"), "hel");
  EXPECT_TRUE(f.stopped());
  EXPECT_EQ(f.push("more"), "");
  EXPECT_EQ(f.flush(), "");
}

TEST(ServerStopStrings, MultibyteStopNeverSplitsACharacter) {
  // "é" is C3 A9; the stop "éa" must hold all of "é" and release it whole.
  std::vector<std::string> sent;
  EXPECT_EQ(run_stop({"\xC3\xA9"
                      "a"},
                     {"x\xC3\xA9", "b"}, &sent),
            "x\xC3\xA9"
            "b");
  EXPECT_EQ(sent[0], "x");
  EXPECT_EQ(sent[1],
            "\xC3\xA9"
            "b");
}

TEST(ServerStopStrings, NoStopsPassThrough) {
  EXPECT_EQ(run_stop({}, {"a", "b"}), "ab");
}

SplitText run_split(bool starts_inside, const std::vector<std::string>& pieces) {
  ReasoningSplitter s(true, starts_inside);
  SplitText all;
  for (const std::string& p : pieces) {
    SplitText t = s.push(p);
    all.reasoning += t.reasoning;
    all.content += t.content;
  }
  SplitText t = s.flush();
  return {all.reasoning + t.reasoning, all.content + t.content};
}

TEST(ServerReasoning, ThinkBlockInReply) {
  SplitText t = run_split(false, {"<th", "ink>\nwhy", " so\n", "</thi", "nk>\n\nAnswer"});
  EXPECT_EQ(t.reasoning, "why so");
  EXPECT_EQ(t.content, "Answer");
}

TEST(ServerReasoning, PromptOpenedThink) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  SplitText t = run_split(true, {"step 1\n\nstep 2</think>", "\n\nOK"});
  EXPECT_EQ(t.reasoning, "step 1\n\nstep 2");
  EXPECT_EQ(t.content, "OK");
}

TEST(ServerReasoning, NoThinkIsAllContentAndCutThoughtIsReasoning) {
  EXPECT_EQ(run_split(false, {"plain <b>", " text"}).content, "plain <b> text");
  EXPECT_EQ(run_split(false, {"<", "b>"}).content, "<b>");
  SplitText cut = run_split(true, {"thinking..."});  // ran out of tokens mid-thought
  EXPECT_EQ(cut.reasoning, "thinking...");
  EXPECT_EQ(cut.content, "");
  ReasoningSplitter off(false, false);
  EXPECT_EQ(off.push("<think>x</think>").content, "<think>x</think>");
}

// Tool-call pieces joined by index, as a client accumulates streamed deltas.
std::vector<ToolCall> join_pieces(const std::vector<ToolCall>& pieces) {
  std::vector<ToolCall> calls;
  for (const ToolCall& p : pieces) {
    if (!p.id.empty()) {
      EXPECT_EQ(p.index, static_cast<int>(calls.size())) << "a call's first piece comes in index order";
      calls.push_back(p);
    } else {
      EXPECT_LT(p.index, static_cast<int>(calls.size())) << "a fragment before its call's first piece";
      if (p.index < static_cast<int>(calls.size())) calls[p.index].arguments += p.arguments;
    }
  }
  return calls;
}

struct Extracted {
  std::string content;
  std::vector<ToolCall> pieces;
  int closed = 0;
};

Extracted extract(const std::vector<std::string>& parts) {
  ToolCallExtractor x(true);
  Extracted out;
  for (const std::string& p : parts) {
    ToolText t = x.push(p);
    out.content += t.content;
    out.pieces.insert(out.pieces.end(), t.calls.begin(), t.calls.end());
    out.closed += t.closed;
  }
  ToolText t = x.flush();
  out.content += t.content;
  out.pieces.insert(out.pieces.end(), t.calls.begin(), t.calls.end());
  return out;
}

TEST(ServerToolCalls, CallsAreExtractedAcrossPieces) {
  Extracted e = extract({"Let me check.<tool", "_call>\n{\"name\": \"get\", \"argu",
                         "ments\": {\"city\": \"Oslo\"}}\n</tool_call>",
                         "<tool_call>{\"name\": \"f\", \"arguments\": \"{}\"}</tool_call>",
                         "<tool_call>not json</tool_call>",
                         "<tool_call>{\"arguments\": {\"a\": 1}, \"name\": \"late\"}</tool_call>"});
  std::vector<ToolCall> calls = join_pieces(e.pieces);
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].name, "get");
  EXPECT_EQ(calls[0].id, "call_0");
  EXPECT_EQ(calls[0].arguments, R"({"city": "Oslo"})");  // as generated
  EXPECT_EQ(calls[1].index, 1);
  EXPECT_EQ(calls[1].arguments, "{}");  // a string value holds the JSON text
  EXPECT_EQ(calls[2].name, "late");     // name after arguments: parsed whole at </tool_call>
  EXPECT_EQ(calls[2].arguments, R"({"a":1})");
  EXPECT_EQ(e.closed, 3);
  EXPECT_EQ(e.content, "Let me check.<tool_call>not json</tool_call>");
}

TEST(ServerToolCalls, StreamsNameFirstThenArgumentFragments) {
  const std::string text =
      "ok <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"O}\\\"</tool_call>\", "
      "\"days\": [1, {\"x\": 2}]}}\n</tool_call> done";
  Extracted whole = extract({text});
  ASSERT_EQ(join_pieces(whole.pieces).size(), 1u);
  ToolCall call = join_pieces(whole.pieces)[0];
  EXPECT_EQ(call.name, "get_weather");
  // Braces and </tool_call> inside strings do not end the arguments.
  EXPECT_EQ(call.arguments, R"({"city": "O}\"</tool_call>", "days": [1, {"x": 2}]})");
  EXPECT_EQ(whole.content, "ok  done");
  // Fed byte by byte: the first piece names the call, fragments follow, the joined call is the same.
  std::vector<std::string> bytes;
  for (char c : text) bytes.emplace_back(1, c);
  Extracted streamed = extract(bytes);
  ASSERT_GE(streamed.pieces.size(), 3u);
  EXPECT_EQ(streamed.pieces[0].name, "get_weather");
  EXPECT_EQ(streamed.pieces[0].arguments, "{");  // the byte that showed where the arguments start
  EXPECT_TRUE(streamed.pieces[1].id.empty());
  EXPECT_EQ(join_pieces(streamed.pieces)[0].arguments, call.arguments);
  EXPECT_EQ(streamed.content, whole.content);
  EXPECT_EQ(streamed.closed, 1);
  // Every split point gives the same result.
  for (size_t cut = 1; cut < text.size(); ++cut) {
    Extracted two = extract({text.substr(0, cut), text.substr(cut)});
    ASSERT_EQ(join_pieces(two.pieces).size(), 1u) << cut;
    EXPECT_EQ(join_pieces(two.pieces)[0].arguments, call.arguments) << cut;
    EXPECT_EQ(two.content, whole.content) << cut;
  }
}

TEST(ServerToolCalls, UnfinishedCallsKeepWhatWasGenerated) {
  // The reply ended inside the arguments: the call stays, with its arguments as far as they went.
  Extracted cut = extract({"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2"});
  ASSERT_EQ(join_pieces(cut.pieces).size(), 1u);
  EXPECT_EQ(join_pieces(cut.pieces)[0].arguments, R"({"a": [1, 2)");
  EXPECT_EQ(cut.closed, 0);
  // A block that never named a call is text.
  Extracted open = extract({"<tool_call>{\"nam"});
  EXPECT_TRUE(open.pieces.empty());
  EXPECT_EQ(open.content, "<tool_call>{\"nam");
  // </tool_call> in the middle of a value ends the call there.
  Extracted early = extract({"<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1</tool_call>after"});
  EXPECT_EQ(join_pieces(early.pieces)[0].arguments, R"({"a": 1)");
  EXPECT_EQ(early.content, "after");
  ToolCallExtractor off(false);
  EXPECT_EQ(off.push("<tool_call>{}</tool_call>").content, "<tool_call>{}</tool_call>");
}

TEST(ServerReplyState, ForcedCallPrefillAndSingleCall) {
  ReplyConfig c;
  c.tools = true;
  c.single_call = true;
  c.prefill = forced_call_prefill("get_weather");
  ReplyState r(c);
  ReplyDelta first = r.push(1, "{\"city\": ", std::nullopt);
  ASSERT_EQ(first.tool_calls.size(), 1u);  // the prefill's call opening comes with the first delta
  EXPECT_EQ(first.tool_calls[0].name, "get_weather");
  EXPECT_EQ(first.tool_calls[0].id, "call_0");
  EXPECT_EQ(first.tool_calls[0].arguments, "{\"city\": ");
  ReplyDelta second =
      r.push(2, "\"Oslo\"}}</tool_call><tool_call>{\"name\": \"g\", \"arguments\": {}}", std::nullopt);
  ASSERT_EQ(second.tool_calls.size(), 1u);  // parallel_tool_calls false: the second call is not given out
  EXPECT_EQ(second.tool_calls[0].arguments, "\"Oslo\"}");
  EXPECT_TRUE(r.stopped());
  EXPECT_TRUE(r.push(3, "more", std::nullopt).empty());
  EXPECT_TRUE(r.finish().empty());
  ASSERT_EQ(r.total().tool_calls.size(), 1u);
  EXPECT_EQ(r.total().tool_calls[0].arguments, R"({"city": "Oslo"})");
  EXPECT_EQ(r.total().content, "");

  // Required: the model names the function itself.
  ReplyConfig any;
  any.tools = true;
  any.prefill = forced_call_prefill("");
  ReplyState q(any);
  EXPECT_TRUE(q.push(1, "f\", \"argum", std::nullopt).tool_calls.empty());
  ReplyDelta named = q.push(2, "ents\": {}}</tool_call>", std::nullopt);
  ASSERT_EQ(named.tool_calls.size(), 1u);
  EXPECT_EQ(named.tool_calls[0].name, "f");
  EXPECT_EQ(named.tool_calls[0].arguments, "{}");
  EXPECT_FALSE(q.stopped());
}

TEST(ServerReplyState, StopReasoningCountsAndHash) {
  ReplyConfig c;
  c.stop = {"END"};
  c.reasoning = true;
  c.starts_in_reasoning = true;
  ReplyState r(c);
  r.push(10, "hmm", std::nullopt);
  r.push(11, "</think>", std::nullopt);
  r.push(12, "Hi E", LogprobReport{-0.5f, {{12, -0.5f}}});
  EXPECT_FALSE(r.stopped());
  ReplyDelta d = r.push(13, "ND tail", std::nullopt);
  EXPECT_TRUE(r.stopped());
  EXPECT_TRUE(r.push(14, "ignored", std::nullopt).empty());
  r.finish();
  EXPECT_EQ(r.total().reasoning, "hmm");
  EXPECT_EQ(r.total().content, "Hi ");
  EXPECT_EQ(r.tokens(), (std::vector<int32_t>{10, 11, 12, 13}));
  EXPECT_EQ(r.reasoning_tokens(), 2);
  ASSERT_EQ(r.total().logprobs.size(), 1u);
  EXPECT_EQ(r.token_hash().size(), 16u);
  ReplyState same(c);
  for (int32_t t : {10, 11, 12, 13}) same.push(t, "", std::nullopt);
  EXPECT_EQ(same.token_hash(), r.token_hash());
}

std::string token_text(int32_t id) {
  return id == 7 ? std::string("\xE2\x82") : "t" + std::to_string(id);
}

TEST(ServerResponseJson, ChatResponseShape) {
  ResponseMeta meta{Endpoint::Chat, "chatcmpl-1", "tiny", 100};
  ReplyDelta reply;
  reply.content = "hello";
  reply.reasoning = "because";
  reply.logprobs = {{7, -1.0f, {{7, -1.0f}, {3, -std::numeric_limits<float>::infinity()}}}};
  std::vector<int32_t> ids = {7};
  Extension ext{42, 3, 2, 0.1, 0.2, "00ff", &ids};
  Json j = response_json(meta, reply, true, "stop", Usage{5, 1, 2, 0}, ext, token_text, "");
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["content"], "hello");
  EXPECT_EQ(j["choices"][0]["message"]["reasoning_content"], "because");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["usage"]["total_tokens"], 6);
  EXPECT_EQ(j["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(j["usage"]["completion_tokens_details"]["reasoning_tokens"], 0);
  EXPECT_EQ(j["extension"]["seed"], 42);
  EXPECT_EQ(j["extension"]["token_ids"], Json::array({7}));
  const Json& lp = j["choices"][0]["logprobs"]["content"][0];
  EXPECT_EQ(lp["bytes"], Json::array({0xE2, 0x82}));
  EXPECT_EQ(lp["top_logprobs"][1]["logprob"], -9999.0);
  std::string text = dump_json(j);  // half a character serialises as U+FFFD, not an exception
  EXPECT_NE(text.find("\xEF\xBF\xBD"), std::string::npos);
}

TEST(ServerResponseJson, ToolCallsAndCompletionsShapes) {
  ResponseMeta chat{Endpoint::Chat, "c", "tiny", 1};
  ReplyDelta reply;
  reply.content = "\n";
  reply.tool_calls = {{0, "call_0", "f", "{}"}};
  Json j = response_json(chat, reply, false, "tool_calls", {}, {}, token_text, "");
  EXPECT_TRUE(j["choices"][0]["message"]["content"].is_null());
  EXPECT_EQ(j["choices"][0]["message"]["tool_calls"][0]["function"]["name"], "f");
  EXPECT_TRUE(j["choices"][0]["logprobs"].is_null());

  ResponseMeta comp{Endpoint::Completions, "cmpl-1", "tiny", 1};
  ReplyDelta text;
  text.content = "xy";
  text.logprobs = {{1, -0.1f, {{1, -0.1f}}}, {2, -0.2f, {}}};
  Json c = response_json(comp, text, true, "length", {}, {}, token_text, "ab");
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "abxy");
  EXPECT_EQ(c["choices"][0]["logprobs"]["tokens"], Json::array({"t1", "t2"}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["text_offset"], Json::array({2, 4}));
  EXPECT_EQ(c["choices"][0]["logprobs"]["top_logprobs"][0]["t1"], -0.1f);
}

TEST(ServerResponseJson, StreamingChunks) {
  ResponseMeta meta{Endpoint::Chat, "c", "tiny", 1};
  size_t offset = 0;
  Json first = chunk_json(meta, {}, false, "", true, token_text, offset);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"], (Json{{"role", "assistant"}, {"content", ""}}));
  ReplyDelta d;
  d.reasoning = "r";
  d.tool_calls = {{2, "call_2", "f", ""}, {1, "", "", "{\"a\""}};
  Json mid = chunk_json(meta, d, false, "", false, token_text, offset);
  EXPECT_EQ(mid["choices"][0]["delta"]["reasoning_content"], "r");
  EXPECT_FALSE(mid["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(mid["choices"][0]["delta"]["tool_calls"][0],
            (Json{{"index", 2},
                  {"id", "call_2"},
                  {"type", "function"},
                  {"function", {{"name", "f"}, {"arguments", ""}}}}));
  EXPECT_EQ(mid["choices"][0]["delta"]["tool_calls"][1],
            (Json{{"index", 1}, {"function", {{"arguments", "{\"a\""}}}}));
  EXPECT_TRUE(mid["choices"][0]["finish_reason"].is_null());
  Json last = chunk_json(meta, {}, false, "length", false, token_text, offset);
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  Json usage = usage_chunk_json(meta, {3, 4, 0, 0}, {});
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(sse_data(Json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_STREQ(kSseDone, "data: [DONE]\n\n");
}

}  // namespace
}  // namespace ds::server
