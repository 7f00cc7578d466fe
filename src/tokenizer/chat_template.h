#pragma once
// A checkpoint's own chat template, rendered byte-for-byte as transformers' apply_chat_template renders it
// with jinja2 (sandboxed, trim_blocks, lstrip_blocks, loop controls, its tojson, raise_exception,
// strftime_now).
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

namespace ds {

namespace jinja {
struct Template;
}

class ChatTemplate {
 public:
  // Parses the template; throws ds::Error naming the line, column and construct of a syntax error.
  explicit ChatTemplate(std::string source);

  // chat_template.jinja if present, else tokenizer_config.json's chat_template (the "default" one of a list).
  static ChatTemplate from_model_dir(const std::filesystem::path& dir);

  // Renders with exactly these variables. ordered_json keeps key order, which tojson output depends on.
  // Throws jinja::TemplateError (a ds::Error) naming the line and column; raise_exception's text is reason().
  std::string render(const nlohmann::ordered_json& context) const;

  // What apply_chat_template renders: message fields that are null dropped, reasoning_content filled from
  // thinking/reasoning, tools and documents passed (null when absent), then `extra` (enable_thinking, special
  // tokens such as bos_token, ...).
  std::string apply(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                    bool add_generation_prompt,
                    const nlohmann::ordered_json& extra = nlohmann::ordered_json::object()) const;

  const std::string& source() const { return source_; }

 private:
  std::string source_;
  std::shared_ptr<const jinja::Template> template_;
};

}  // namespace ds
