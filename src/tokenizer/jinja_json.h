#pragma once
// JSON in and out: context values from nlohmann's ordered_json (keeping key order, as Python dicts do) and
// Python's json.dumps for transformers' tojson filter (ensure_ascii=False unless asked, indent, separators).
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "tokenizer/jinja_value.h"

namespace ds::jinja {

Value from_json(const nlohmann::ordered_json& json);

struct JsonStyle {
  std::optional<std::string> indent;  // json.dumps indent (spaces already expanded); none means one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;
};

std::string to_json(const Value& value, const JsonStyle& style);

}  // namespace ds::jinja
