#include "tokenizer/chat_template.h"

#include <fstream>
#include <sstream>

#include "core/error.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_json.h"
#include "tokenizer/jinja_parser.h"

namespace ds {

using nlohmann::ordered_json;

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) ds::fail("cannot read {}", path.string());
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

// transformers 5.x _normalize_chat_messages + _alias_reasoning_fields.
ordered_json normalize_messages(const ordered_json& messages) {
  if (!messages.is_array()) ds::fail("chat template: messages must be a list, got {}", messages.type_name());
  if (messages.empty())
    ds::fail("Cannot apply chat template to an empty conversation. Provide at least one message.");
  ordered_json out = ordered_json::array();
  for (const auto& message : messages) {
    if (!message.is_object()) ds::fail("Chat messages should be dicts, but got {}", message.dump());
    ordered_json kept = ordered_json::object();
    for (const auto& [key, value] : message.items())
      if (!value.is_null()) kept[key] = value;
    const ordered_json* reasoning = nullptr;
    for (const char* key : {"reasoning_content", "thinking", "reasoning"}) {
      if (kept.contains(key)) {
        reasoning = &kept[key];
        break;
      }
    }
    if (reasoning) {
      // Python's {"thinking": r, **message, "reasoning_content": r}: thinking goes first.
      ordered_json aliased = ordered_json::object();
      aliased["thinking"] = *reasoning;
      for (const auto& [key, value] : kept.items()) aliased[key] = key == "thinking" ? *reasoning : value;
      aliased["reasoning_content"] = *reasoning;
      kept = std::move(aliased);
    }
    out.push_back(std::move(kept));
  }
  return out;
}

}  // namespace

ChatTemplate::ChatTemplate(std::string source)
    : source_(std::move(source)), template_(std::make_shared<const jinja::Template>(jinja::parse(source_))) {}

ChatTemplate ChatTemplate::from_model_dir(const std::filesystem::path& dir) {
  if (std::filesystem::exists(dir / "chat_template.jinja"))
    return ChatTemplate(read_file(dir / "chat_template.jinja"));
  std::filesystem::path config_path = dir / "tokenizer_config.json";
  if (!std::filesystem::exists(config_path))
    ds::fail("{}: no chat_template.jinja or tokenizer_config.json", dir.string());
  ordered_json config = ordered_json::parse(read_file(config_path));
  const auto it = config.find("chat_template");
  if (it == config.end()) ds::fail("{}: has no chat_template", config_path.string());
  if (it->is_string()) return ChatTemplate(it->get<std::string>());
  if (it->is_array()) {
    for (const auto& entry : *it)
      if (entry.value("name", "") == "default") return ChatTemplate(entry.at("template").get<std::string>());
  }
  ds::fail("{}: chat_template is neither a string nor a list with a \"default\" entry", config_path.string());
}

std::string ChatTemplate::render(const ordered_json& context) const {
  if (!context.is_object())
    ds::fail("chat template context must be a JSON object, got {}", context.type_name());
  jinja::Value variables;
  try {
    variables = jinja::from_json(context);
  } catch (const jinja::EvalError& e) {
    ds::fail("chat template context: {}", e.what());
  }
  return jinja::Interpreter::render(*template_, variables.as_dict());
}

std::string ChatTemplate::apply(const ordered_json& messages, const ordered_json& tools,
                                bool add_generation_prompt, const ordered_json& extra) const {
  ordered_json context = ordered_json::object();
  context["messages"] = normalize_messages(messages);
  context["tools"] = tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = add_generation_prompt;
  if (!extra.is_null()) {
    if (!extra.is_object())
      ds::fail("chat template variables must be a JSON object, got {}", extra.type_name());
    for (const auto& [key, value] : extra.items()) context[key] = value;
  }
  return render(context);
}

}  // namespace ds
