// Request bodies -> ApiRequest. Field names and ranges follow OpenAI, with vLLM's extensions where OpenAI is
// silent.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "server/api_error.h"
#include "server/api_request.h"
#include "server/chat_messages.h"
#include "server/request_fields.h"

namespace ds::server {

namespace {

constexpr int64_t kMaxInt32 = INT32_MAX;

void read_model(const Json& j, const ModelLimits& limits, ApiRequest& r) {
  std::optional<std::string> model = read_string(j, "model");
  if (!model) {
    r.model = limits.names.empty() ? "" : limits.names.front();
    return;
  }
  if (std::find(limits.names.begin(), limits.names.end(), *model) == limits.names.end())
    reject("model",
           fmt::format("the model '{}' does not exist; this server serves '{}'", *model,
                       limits.names.empty() ? "" : limits.names.front()),
           "model_not_found");
  r.model = *model;
}

int32_t token_id(const Json& v, const ModelLimits& limits, const std::string& param) {
  if (!v.is_number_integer()) reject(param, fmt::format("'{}' must hold integer token ids", param));
  if (v.is_number_unsigned() ? v.get<uint64_t>() >= static_cast<uint64_t>(limits.vocab_size)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() >= limits.vocab_size))
    reject(param,
           fmt::format("token id {} in '{}' is out of range [0, {})", v.dump(), param, limits.vocab_size));
  return static_cast<int32_t>(v.get<int64_t>());
}

void read_stop(const Json& j, const ModelLimits& limits, ApiRequest& r) {
  if (const Json* stop = field(j, "stop")) {
    if (stop->is_string()) {
      if (!stop->get<std::string>().empty()) r.stop.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      for (const Json& s : *stop) {
        if (!s.is_string()) reject("stop", "'stop' must be a string or an array of strings");
        if (!s.get<std::string>().empty()) r.stop.push_back(s.get<std::string>());
      }
    } else {
      reject("stop",
             fmt::format("'stop' must be a string or an array of strings, got {}", json_type_name(*stop)));
    }
  }
  if (const Json* ids = field(j, "stop_token_ids")) {
    if (!ids->is_array()) reject("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    for (const Json& id : *ids) r.stop_token_ids.push_back(token_id(id, limits, "stop_token_ids"));
  }
}

void read_sampling(const Json& j, ApiRequest& r) {
  SamplingParams& s = r.sampling;
  auto number = [&](const char* name, float& out) {
    // A double past float's range converts to +-inf explicitly (the cast would be undefined), which
    // validate() then refuses by name.
    if (auto v = read_number(j, name))
      out = std::fabs(*v) > std::numeric_limits<float>::max()
                ? (*v > 0 ? 1.0f : -1.0f) * std::numeric_limits<float>::infinity()
                : static_cast<float>(*v);
  };
  number("temperature", s.temperature);
  number("top_p", s.top_p);
  number("min_p", s.min_p);
  number("presence_penalty", s.presence_penalty);
  number("frequency_penalty", s.frequency_penalty);
  number("repetition_penalty", s.repetition_penalty);
  if (auto k = read_int(j, "top_k", -1, kMaxInt32)) s.top_k = static_cast<int32_t>(*k);
  if (auto seed = read_int(j, "seed", 0, INT64_MAX)) {
    s.seed = static_cast<uint64_t>(*seed);
    r.seed_given = true;
  } else {
    s.seed = random_seed();
  }
  try {
    s.validate();
  } catch (const ApiError&) {
    throw;
  } catch (const Error& e) {
    // validate() names the field first: "top_p must be in (0, 1], got 1.5".
    std::string message = e.what();
    reject(message.substr(0, message.find(' ')), message);
  }
}

void read_common(const Json& j, const ModelLimits& limits, ApiRequest& r) {
  read_model(j, limits, r);
  if (auto n = read_int(j, "n", 1, kMaxInt32); n && *n != 1)
    reject("n", fmt::format("'n' must be 1 (one choice per request), got {}", *n));
  if (auto best_of = read_int(j, "best_of", 1, kMaxInt32); best_of && *best_of != 1)
    reject("best_of", fmt::format("'best_of' must be 1, got {}", *best_of));
  read_stop(j, limits, r);
  read_sampling(j, r);
  r.ignore_eos = read_bool(j, "ignore_eos").value_or(false);
  r.stream = read_bool(j, "stream").value_or(false);
  if (const Json* options = field(j, "stream_options")) {
    if (!options->is_object()) reject("stream_options", "'stream_options' must be an object");
    if (!r.stream) reject("stream_options", "'stream_options' is only allowed when 'stream' is true");
    try {
      r.include_usage = read_bool(*options, "include_usage").value_or(false);
    } catch (ApiError& e) {
      e.param = "stream_options.include_usage";
      throw;
    }
  }
  r.use_drafts = read_bool(j, "draft").value_or(true);
  r.skip_special_tokens = read_bool(j, "skip_special_tokens").value_or(true);
  r.return_token_ids = read_bool(j, "return_token_ids").value_or(false);
  for (const char* unsupported :
       {"guided_json", "guided_regex", "guided_choice", "guided_grammar", "logit_bias"})
    if (field(j, unsupported))
      reject(unsupported, fmt::format("'{}' is not supported by this server yet", unsupported));
  if (const Json* format = field(j, "response_format")) {
    const Json* type = format->is_object() ? field(*format, "type") : nullptr;
    if (!type || !type->is_string()) reject("response_format", "'response_format.type' must be a string");
    if (*type != "text")
      reject("response_format", fmt::format("response_format '{}' is not supported by this server yet",
                                            type->get<std::string>()));
  }
}

// The function names offered in 'tools', for messages.
std::string tool_names(const Json& tools) {
  std::string names;
  for (const Json& t : tools)
    names += (names.empty() ? "'" : ", '") + t["function"]["name"].get<std::string>() + "'";
  return names;
}

// none | auto | required | {"type": "function", "function": {"name": ...}}, and parallel_tool_calls.
void read_tool_choice(const Json& j, ApiRequest& r) {
  r.parallel_tool_calls = read_bool(j, "parallel_tool_calls").value_or(true);
  const Json* choice = field(j, "tool_choice");
  if (!choice) return;
  if (choice->is_string()) {
    const std::string& c = choice->get_ref<const std::string&>();
    if (c == "none")
      r.tool_choice = ToolChoice::None;
    else if (c == "auto")
      r.tool_choice = ToolChoice::Auto;
    else if (c == "required")
      r.tool_choice = ToolChoice::Required;
    else
      reject("tool_choice",
             fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                         "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got '{}'",
                         c));
  } else if (choice->is_object()) {
    const Json* type = field(*choice, "type");
    if (!type || *type != "function") reject("tool_choice.type", "'tool_choice.type' must be \"function\"");
    const Json* fn = field(*choice, "function");
    if (!fn || !fn->is_object()) reject("tool_choice.function", "'tool_choice.function' must be an object");
    const Json* name = field(*fn, "name");
    if (!name || !name->is_string())
      reject("tool_choice.function.name", "'tool_choice.function.name' must be a string");
    r.tool_choice = ToolChoice::Named;
    r.tool_name = name->get<std::string>();
  } else {
    reject("tool_choice",
           fmt::format("'tool_choice' must be a string or an object, got {}", json_type_name(*choice)));
  }
  if (r.tool_choice == ToolChoice::None) {
    r.tools = Json();  // the model is not told of tools it may not call, and nothing is parsed as a call
    return;
  }
  if ((r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) && r.tools.is_null())
    reject("tool_choice", "'tool_choice' required or a named function needs 'tools'");
  if (r.tool_choice == ToolChoice::Named) {
    bool offered = std::any_of(r.tools.begin(), r.tools.end(),
                               [&](const Json& t) { return t["function"]["name"] == r.tool_name; });
    if (!offered)
      reject(
          "tool_choice.function.name",
          fmt::format("'tool_choice.function.name' is '{}', which is not among the functions in 'tools' ({})",
                      r.tool_name, tool_names(r.tools)));
  }
}

void read_max_tokens(const Json& j, const char* name, ApiRequest& r) {
  if (auto m = read_int(j, name, 1, kMaxInt32)) r.max_tokens = static_cast<int32_t>(*m);
}

}  // namespace

ApiRequest parse_chat_request(std::string_view body, const ModelLimits& limits) {
  Json j = parse_request_body(body);
  ApiRequest r;
  r.endpoint = Endpoint::Chat;
  read_common(j, limits, r);
  const Json* messages = field(j, "messages");
  if (!messages) reject("messages", "'messages' is required");
  r.messages = normalize_messages(*messages);
  r.tools = normalize_tools(field(j, "tools"));
  read_tool_choice(j, r);
  read_max_tokens(j, "max_tokens", r);
  read_max_tokens(j, "max_completion_tokens", r);  // the newer name wins
  bool logprobs = read_bool(j, "logprobs").value_or(false);
  auto top = read_int(j, "top_logprobs", 0, 20);
  if (top && !logprobs) reject("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
  if (logprobs) r.top_logprobs = static_cast<int32_t>(top.value_or(0));
  if (const Json* kwargs = field(j, "chat_template_kwargs")) {
    if (!kwargs->is_object()) reject("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    r.template_kwargs = *kwargs;
    if (const Json* t = field(*kwargs, "enable_thinking"); t && !t->is_boolean())
      reject("chat_template_kwargs.enable_thinking",
             "'chat_template_kwargs.enable_thinking' must be a boolean");
  }
  if (auto effort = read_string(j, "reasoning_effort")) {
    if (*effort != "low" && *effort != "medium" && *effort != "high")
      reject("reasoning_effort",
             fmt::format("'reasoning_effort' must be low, medium or high, got '{}'", *effort));
    r.template_kwargs["reasoning_effort"] = *effort;
  }
  r.add_generation_prompt = read_bool(j, "add_generation_prompt").value_or(true);
  return r;
}

ApiRequest parse_completions_request(std::string_view body, const ModelLimits& limits) {
  Json j = parse_request_body(body);
  ApiRequest r;
  r.endpoint = Endpoint::Completions;
  read_common(j, limits, r);
  const Json* prompt = field(j, "prompt");
  if (!prompt) reject("prompt", "'prompt' is required");
  const Json* p = prompt;
  if (p->is_array() && p->size() == 1 && ((*p)[0].is_string() || (*p)[0].is_array())) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && (*p)[0].is_number()) {
    r.prompt_is_ids = true;
    for (const Json& id : *p) r.prompt_ids.push_back(token_id(id, limits, "prompt"));
  } else if (p->is_array() && p->size() > 1 && ((*p)[0].is_string() || (*p)[0].is_array())) {
    reject("prompt", "batched prompts are not supported (n = 1 semantics): send one prompt per request");
  } else if (p->is_array() && p->empty()) {
    reject("prompt", "'prompt' must not be empty");
  } else {
    reject("prompt", "'prompt' must be a string, an array of one string, or an array of token ids");
  }
  r.max_tokens = 16;  // OpenAI's and vLLM's default for completions
  read_max_tokens(j, "max_tokens", r);
  if (auto logprobs = read_int(j, "logprobs", 0, 20)) r.top_logprobs = static_cast<int32_t>(*logprobs);
  r.echo = read_bool(j, "echo").value_or(false);
  if (field(j, "suffix")) reject("suffix", "'suffix' is not supported");
  return r;
}

}  // namespace ds::server
