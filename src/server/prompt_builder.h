#pragma once
// Requests -> prompt token ids: the model's chat template for chat, the tokenizer for text prompts.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/api_request.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ds::server {

struct PreparedPrompt {
  std::vector<int32_t> ids;
  std::string text;                  // the rendered prompt (completions' echo)
  bool reasoning = false;            // the template thinks: split <think> blocks out of the reply
  bool starts_in_reasoning = false;  // the rendered prompt ends with an open <think>
  std::string reply_prefill;  // the reply's start the prompt already holds (a forced tool call's opening)
};

// The assistant text that forces a call: a Hermes <tool_call> opening with the named function's name (any
// function's when `name` is empty); an open <think> is closed first.
std::string forced_call_prefill(const std::string& name);

class PromptBuilder {
 public:
  PromptBuilder(const Tokenizer& tokenizer, std::optional<ChatTemplate> chat_template);

  // Throws ApiError: a template's raise_exception or render error is a 400 on "messages".
  PreparedPrompt build(const ApiRequest& request) const;
  // The chat prompt text alone (for /tokenize with messages).
  std::string render_chat(const Json& messages, const Json& tools, bool add_generation_prompt,
                          const Json& template_kwargs) const;
  const Tokenizer& tokenizer() const { return tokenizer_; }

 private:
  const Tokenizer& tokenizer_;
  std::optional<ChatTemplate> template_;
  bool thinking_template_ = false;
};

}  // namespace ds::server
