#include "tokenizer/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizer/jinja_text.h"

namespace ds::jinja {

Value from_json(const nlohmann::ordered_json& json) {
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value::none();
    case nlohmann::ordered_json::value_t::boolean:
      return Value::boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value::integer(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      auto u = json.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        raise("OverflowError: integer {} does not fit in 64 bits", u);
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value::number(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value::string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData dict;
      for (const auto& [key, item] : json.items()) dict.set(key, from_json(item));
      return Value::dict(std::move(dict));
    }
    default:
      raise("TypeError: unsupported JSON value (binary or discarded)");
  }
}

namespace {

void append_escaped(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  for (char32_t c : text::decode(s)) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20 || (ensure_ascii && c >= 0x7F)) {
          if (c >= 0x10000) {
            // Python writes astral characters as surrogate pairs.
            char32_t v = c - 0x10000;
            out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
          } else {
            out += fmt::format("\\u{:04x}", static_cast<uint32_t>(c));
          }
        } else {
          text::append_utf8(out, c);
        }
    }
  }
  out.push_back('"');
}

class Encoder {
 public:
  explicit Encoder(const JsonStyle& style) : style_(style) {}

  void encode(const Value& v, int level) {
    switch (v.kind()) {
      case Value::Kind::None:
        out_ += "null";
        return;
      case Value::Kind::Bool:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case Value::Kind::Int:
        out_ += std::to_string(v.as_int());
        return;
      case Value::Kind::Float: {
        double d = v.as_double();
        if (std::isnan(d))
          out_ += "NaN";
        else if (std::isinf(d))
          out_ += d < 0 ? "-Infinity" : "Infinity";
        else
          out_ += text::repr_float(d);
        return;
      }
      case Value::Kind::String:
        append_escaped(out_, v.as_string(), style_.ensure_ascii);
        return;
      case Value::Kind::List: {
        const auto& items = v.as_list().items;
        if (items.empty()) {
          out_ += "[]";
          return;
        }
        out_ += "[";
        for (size_t i = 0; i < items.size(); ++i) {
          separator(i == 0, level + 1);
          encode(items[i], level + 1);
        }
        close(level, ']');
        return;
      }
      case Value::Kind::Dict: {
        std::vector<const std::pair<std::string, Value>*> items;
        for (const auto& item : v.as_dict().items) items.push_back(&item);
        if (items.empty()) {
          out_ += "{}";
          return;
        }
        if (style_.sort_keys)
          std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
        out_ += "{";
        for (size_t i = 0; i < items.size(); ++i) {
          separator(i == 0, level + 1);
          append_escaped(out_, items[i]->first, style_.ensure_ascii);
          out_ += style_.key_separator;
          encode(items[i]->second, level + 1);
        }
        close(level, '}');
        return;
      }
      default:
        raise("TypeError: Object of type {} is not JSON serializable", type_name(v));
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void separator(bool first, int level) {
    if (!first) out_ += style_.item_separator;
    if (style_.indent) {
      out_ += "\n";
      for (int i = 0; i < level; ++i) out_ += *style_.indent;
    }
  }

  void close(int level, char bracket) {
    if (style_.indent) {
      out_ += "\n";
      for (int i = 0; i < level; ++i) out_ += *style_.indent;
    }
    out_.push_back(bracket);
  }

  const JsonStyle& style_;
  std::string out_;
};

}  // namespace

std::string to_json(const Value& value, const JsonStyle& style) {
  Encoder encoder(style);
  encoder.encode(value, 0);
  return encoder.take();
}

}  // namespace ds::jinja
