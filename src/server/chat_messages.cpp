#include "server/chat_messages.h"

#include <fmt/format.h>

#include <string>

#include "server/api_error.h"

namespace ds::server {

namespace {

std::string content_text(const Json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array())
    reject(where, fmt::format("'{}' must be a string or an array of content parts, got {}", where,
                              json_type_name(content)));
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    std::string part_where = fmt::format("{}[{}]", where, j);
    if (!part.is_object()) reject(part_where, fmt::format("'{}' must be an object", part_where));
    const Json* type = field(part, "type");
    if (!type || !type->is_string())
      reject(part_where + ".type", fmt::format("'{}.type' must be a string", part_where));
    if (*type != "text")
      reject(part_where + ".type",
             fmt::format("content part type '{}' is not supported (this model reads text)",
                         type->get<std::string>()));
    const Json* t = field(part, "text");
    if (!t || !t->is_string())
      reject(part_where + ".text", fmt::format("'{}.text' must be a string", part_where));
    if (j > 0) text += "\n";
    text += t->get<std::string>();
  }
  return text;
}

Json normalize_tool_calls(const Json& calls, const std::string& where) {
  if (!calls.is_array()) reject(where, fmt::format("'{}' must be an array", where));
  Json out = Json::array();
  for (size_t j = 0; j < calls.size(); ++j) {
    std::string w = fmt::format("{}[{}]", where, j);
    const Json& call = calls[j];
    const Json* fn = call.is_object() ? field(call, "function") : nullptr;
    if (!fn || !fn->is_object()) reject(w + ".function", fmt::format("'{}.function' must be an object", w));
    const Json* name = field(*fn, "name");
    if (!name || !name->is_string())
      reject(w + ".function.name", fmt::format("'{}.function.name' must be a string", w));
    Json args = Json::object();
    if (const Json* a = field(*fn, "arguments")) {
      if (a->is_string()) {
        args = Json::parse(a->get<std::string>(), nullptr, false);
        if (args.is_discarded())
          reject(w + ".function.arguments", fmt::format("'{}.function.arguments' is not valid JSON", w));
      } else if (a->is_object()) {
        args = *a;
      } else {
        reject(w + ".function.arguments", fmt::format("'{}.function.arguments' must be a JSON string", w));
      }
    }
    Json entry = call;
    entry["type"] = "function";
    entry["function"] = Json{{"name", *name}, {"arguments", args}};
    out.push_back(entry);
  }
  return out;
}

}  // namespace

Json normalize_messages(const Json& messages) {
  if (!messages.is_array())
    reject("messages", fmt::format("'messages' must be an array, got {}", json_type_name(messages)));
  if (messages.empty()) reject("messages", "'messages' must not be empty");
  Json out = Json::array();
  for (size_t i = 0; i < messages.size(); ++i) {
    std::string where = fmt::format("messages[{}]", i);
    const Json& m = messages[i];
    if (!m.is_object())
      reject(where, fmt::format("'{}' must be an object, got {}", where, json_type_name(m)));
    const Json* role = field(m, "role");
    if (!role || !role->is_string())
      reject(where + ".role", fmt::format("'{}.role' must be a string", where));
    const std::string r = role->get<std::string>();
    if (r != "system" && r != "developer" && r != "user" && r != "assistant" && r != "tool")
      reject(where + ".role",
             fmt::format("'{}.role' must be system, developer, user, assistant or tool, got '{}'", where, r));
    Json entry = m;  // unknown keys pass through: templates may read them (name, tool_call_id, ...)
    const Json* content = field(m, "content");
    const Json* calls = field(m, "tool_calls");
    if (content) {
      entry["content"] = content_text(*content, where + ".content");
    } else if (r == "assistant" && calls) {
      entry["content"] = "";
    } else if (r != "assistant") {
      reject(where + ".content", fmt::format("'{}.content' is required for role '{}'", where, r));
    } else {
      entry["content"] = "";
    }
    if (calls) {
      if (r != "assistant") reject(where + ".tool_calls", "only assistant messages carry tool_calls");
      entry["tool_calls"] = normalize_tool_calls(*calls, where + ".tool_calls");
    }
    for (const char* key : {"reasoning_content", "name", "tool_call_id"})
      if (const Json* v = field(m, key); v && !v->is_string())
        reject(fmt::format("{}.{}", where, key), fmt::format("'{}.{}' must be a string", where, key));
    out.push_back(entry);
  }
  return out;
}

Json normalize_tools(const Json* tools) {
  if (!tools) return Json();
  if (!tools->is_array())
    reject("tools", fmt::format("'tools' must be an array, got {}", json_type_name(*tools)));
  for (size_t i = 0; i < tools->size(); ++i) {
    const Json& t = (*tools)[i];
    std::string where = fmt::format("tools[{}]", i);
    const Json* fn = t.is_object() ? field(t, "function") : nullptr;
    if (!fn || !fn->is_object())
      reject(where + ".function", fmt::format("'{}.function' must be an object", where));
    const Json* name = field(*fn, "name");
    if (!name || !name->is_string() || name->get<std::string>().empty())
      reject(where + ".function.name", fmt::format("'{}.function.name' must be a non-empty string", where));
  }
  return *tools;
}

}  // namespace ds::server
