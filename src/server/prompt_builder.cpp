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

PreparedPrompt PromptBuilder::build(const ApiRequest& r) const {
  PreparedPrompt p;
  if (r.endpoint == Endpoint::Chat) {
    p.text = render_chat(r.messages, r.tools, r.add_generation_prompt, r.template_kwargs);
    p.ids = tokenizer_.encode(p.text, true);
    p.reasoning = thinking_template_;
    p.starts_in_reasoning = thinking_template_ && prompt_opens_reasoning(p.text);
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
