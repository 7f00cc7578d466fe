#pragma once
// A chat or completions request after validation: typed fields, the chat messages normalised for the
// template.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/sampling_params.h"

namespace ds::server {

using Json = nlohmann::ordered_json;

enum class Endpoint { Chat, Completions };

// tool_choice: Required and Named force a call by ending the prompt with the call's opening.
enum class ToolChoice { Auto, None, Required, Named };

// What the served model allows; requests are checked against it before anything is tokenized.
struct ModelLimits {
  std::vector<std::string> names;  // accepted "model" values (the first is reported back)
  int64_t vocab_size = 0;          // token ids must lie in [0, vocab_size)
};

struct ApiRequest {
  Endpoint endpoint = Endpoint::Chat;
  std::string model;  // as the client named it (or the served name when absent)

  // Chat: messages with content as a string (text parts joined), tool-call arguments parsed to objects.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  nlohmann::ordered_json tools;  // null when absent
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_name;            // ToolChoice::Named: the function the reply must call
  bool parallel_tool_calls = true;  // false: the reply ends after its first call
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
  bool add_generation_prompt = true;

  // Completions: a text prompt or token ids.
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;

  int32_t max_tokens = -1;  // -1: up to the context limit
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  SamplingParams sampling;
  bool seed_given = false;
  bool stream = false, include_usage = false;
  int32_t top_logprobs = -1;  // -1: none; else the chosen token's logprob plus this many alternatives
  bool echo = false;          // completions: the prompt text before the reply
  bool use_drafts = true;     // extension "draft"
  bool skip_special_tokens = true;
  bool return_token_ids = false;  // vLLM's extension: list the reply's token ids
};

// Throw ApiError (400) naming the field for every malformed or unsupported input.
ApiRequest parse_chat_request(std::string_view body, const ModelLimits& limits);
ApiRequest parse_completions_request(std::string_view body, const ModelLimits& limits);

}  // namespace ds::server
