#include "server/prompt_builder.h"

#include <fmt/format.h>

#include "server/api_error.h"
#include "server/reasoning_split.h"

namespace ds::server {

PromptBuilder::PromptBuilder(const Tokenizer& tokenizer, std::optional<ChatTemplate> chat_template)
    : tokenizer_(tokenizer), template_(std::move(chat_template)) {
  thinking_template_ = template_ && template_->source().find("</think>") != std::string::npos;
}

std::string PromptBuilder::render_chat(const Json& messages, const Json& tools, bool add_generation_prompt,
                                       const Json& template_kwargs) const {
  if (!template_) reject("messages", "this model has no chat template; use /v1/completions");
  Json extra = Json::object();
  // Templates read the special tokens by name, as transformers passes them.
  const TokenizerConfig& config = tokenizer_.config();
  if (config.bos_token) extra["bos_token"] = *config.bos_token;
  if (config.eos_token) extra["eos_token"] = *config.eos_token;
  for (const auto& [key, value] : template_kwargs.items()) extra[key] = value;
  try {
    return template_->apply(messages, tools, add_generation_prompt, extra);
  } catch (const Error& e) {
    reject("messages", fmt::format("the chat template refused the messages: {}", e.what()));
  }
}

std::string forced_call_prefill(const std::string& name) {
  if (name.empty()) return "<tool_call>\n{\"name\": \"";
  return "<tool_call>\n{\"name\": " + Json(name).dump() + ", \"arguments\": ";
}

PreparedPrompt PromptBuilder::build(const ApiRequest& r) const {
  PreparedPrompt p;
  if (r.endpoint == Endpoint::Chat) {
    p.text = render_chat(r.messages, r.tools, r.add_generation_prompt, r.template_kwargs);
    p.reasoning = thinking_template_;
    p.starts_in_reasoning = thinking_template_ && prompt_opens_reasoning(p.text);
    if (r.tool_choice == ToolChoice::Required || r.tool_choice == ToolChoice::Named) {
      // A forced call is the reply's whole start: the model gives the arguments (and, for required, the
      // name).
      p.reply_prefill = forced_call_prefill(r.tool_choice == ToolChoice::Named ? r.tool_name : "");
      if (p.starts_in_reasoning) p.text += "\n</think>\n\n";
      p.text += p.reply_prefill;
      p.reasoning = p.starts_in_reasoning = false;
    }
    p.ids = tokenizer_.encode(p.text, true);
  } else if (r.prompt_is_ids) {
    p.ids = r.prompt_ids;
    if (r.echo) p.text = tokenizer_.decode(p.ids);
  } else {
    p.text = r.prompt_text;
    p.ids = tokenizer_.encode(p.text, true);
  }
  if (p.ids.empty()) reject(r.endpoint == Endpoint::Chat ? "messages" : "prompt", "the prompt has no tokens");
  return p;
}

}  // namespace ds::server
