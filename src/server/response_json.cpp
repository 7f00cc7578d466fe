#include "server/response_json.h"

#include <algorithm>

namespace ds::server {

namespace {

// JSON has no -inf; vLLM reports excluded tokens as -9999.
double finite_logprob(float lp) {
  return std::max(static_cast<double>(lp), -9999.0);
}

Json bytes_of(const std::string& s) {
  Json out = Json::array();
  for (unsigned char c : s) out.push_back(static_cast<int>(c));
  return out;
}

// Whole calls; streamed pieces carry id, type and name only in a call's first piece, as OpenAI streams them.
Json tool_calls_json(const std::vector<ToolCall>& calls, bool streaming) {
  Json out = Json::array();
  for (const ToolCall& c : calls) {
    Json call = Json::object();
    if (streaming) call["index"] = c.index;
    if (!streaming || !c.id.empty()) {
      call["id"] = c.id;
      call["type"] = "function";
      call["function"] = {{"name", c.name}, {"arguments", c.arguments}};
    } else {
      call["function"] = {{"arguments", c.arguments}};
    }
    out.push_back(call);
  }
  return out;
}

Json choice_base() {
  return Json{{"index", 0}};
}

Json finish_value(const std::string& finish) {
  return finish.empty() ? Json() : Json(finish);
}

}  // namespace

std::string dump_json(const Json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string sse_data(const Json& json) {
  return "data: " + dump_json(json) + "\n\n";
}

Json usage_json(const Usage& u) {
  return Json{{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}},
              {"completion_tokens_details", {{"reasoning_tokens", u.reasoning_tokens}}}};
}

Json extension_json(const Extension& e) {
  Json j = {{"seed", e.seed},
            {"drafted", e.drafted},
            {"accepted", e.accepted},
            {"prefill_seconds", e.prefill_seconds},
            {"decode_seconds", e.decode_seconds},
            {"token_hash", e.token_hash}};
  if (e.token_ids) j["token_ids"] = *e.token_ids;
  return j;
}

Json logprobs_json(Endpoint endpoint, const std::vector<LogprobEntry>& entries, const TokenText& text,
                   size_t& text_offset) {
  if (endpoint == Endpoint::Chat) {
    Json content = Json::array();
    for (const LogprobEntry& e : entries) {
      std::string token = text(e.id);
      Json top = Json::array();
      for (const TokenLogprob& t : e.top) {
        std::string s = text(t.id);
        top.push_back({{"token", s}, {"logprob", finite_logprob(t.logprob)}, {"bytes", bytes_of(s)}});
      }
      content.push_back({{"token", token},
                         {"logprob", finite_logprob(e.logprob)},
                         {"bytes", bytes_of(token)},
                         {"top_logprobs", top}});
    }
    return Json{{"content", content}};
  }
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (const LogprobEntry& e : entries) {
    std::string token = text(e.id);
    tokens.push_back(token);
    token_logprobs.push_back(finite_logprob(e.logprob));
    Json alternatives = Json::object();
    for (const TokenLogprob& t : e.top) alternatives[text(t.id)] = finite_logprob(t.logprob);
    top.push_back(alternatives);
    offsets.push_back(text_offset);
    text_offset += token.size();
  }
  return Json{{"tokens", tokens},
              {"token_logprobs", token_logprobs},
              {"top_logprobs", top},
              {"text_offset", offsets}};
}

Json chunk_json(const ResponseMeta& meta, const ReplyDelta& delta, bool with_logprobs,
                const std::string& finish, bool role, const TokenText& text, size_t& text_offset) {
  Json choice = choice_base();
  if (meta.endpoint == Endpoint::Chat) {
    Json d = Json::object();
    if (role) d["role"] = "assistant";
    if (!delta.reasoning.empty()) d["reasoning_content"] = delta.reasoning;
    if (!delta.content.empty() || role) d["content"] = delta.content;
    if (!delta.tool_calls.empty()) d["tool_calls"] = tool_calls_json(delta.tool_calls, true);
    choice["delta"] = d;
  } else {
    choice["text"] = delta.content;
  }
  choice["logprobs"] = with_logprobs && !delta.logprobs.empty()
                           ? logprobs_json(meta.endpoint, delta.logprobs, text, text_offset)
                           : Json();
  choice["finish_reason"] = finish_value(finish);
  const char* object = meta.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion";
  return Json{{"id", meta.id},
              {"object", object},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", Json::array({choice})}};
}

Json usage_chunk_json(const ResponseMeta& meta, const Usage& usage, const Extension& extension) {
  const char* object = meta.endpoint == Endpoint::Chat ? "chat.completion.chunk" : "text_completion";
  return Json{{"id", meta.id},
              {"object", object},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", Json::array()},
              {"usage", usage_json(usage)},
              {"extension", extension_json(extension)}};
}

Json response_json(const ResponseMeta& meta, const ReplyDelta& reply, bool with_logprobs,
                   const std::string& finish, const Usage& usage, const Extension& extension,
                   const TokenText& text, const std::string& echo_prefix) {
  size_t offset = echo_prefix.size();
  Json choice = choice_base();
  Json logprobs = with_logprobs ? logprobs_json(meta.endpoint, reply.logprobs, text, offset) : Json();
  if (meta.endpoint == Endpoint::Chat) {
    Json message = {{"role", "assistant"}};
    // A reply that only called tools has null content, as OpenAI sends it.
    bool only_calls =
        !reply.tool_calls.empty() && reply.content.find_first_not_of(" \t\r\n") == std::string::npos;
    message["content"] = only_calls ? Json() : Json(reply.content);
    message["reasoning_content"] = reply.reasoning.empty() ? Json() : Json(reply.reasoning);
    if (!reply.tool_calls.empty()) message["tool_calls"] = tool_calls_json(reply.tool_calls, false);
    choice["message"] = message;
    choice["logprobs"] = logprobs;
  } else {
    choice["text"] = echo_prefix + reply.content;
    choice["logprobs"] = logprobs;
  }
  choice["finish_reason"] = finish_value(finish);
  const char* object = meta.endpoint == Endpoint::Chat ? "chat.completion" : "text_completion";
  return Json{{"id", meta.id},
              {"object", object},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", Json::array({choice})},
              {"usage", usage_json(usage)},
              {"extension", extension_json(extension)}};
}

}  // namespace ds::server
