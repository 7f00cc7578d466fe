#include "tokenizer/jinja_value.h"

#include <cmath>

#include "tokenizer/jinja_text.h"

namespace ds::jinja {

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : items)
    if (k == key) return &v;
  return nullptr;
}

void DictData::set(std::string key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(std::move(key), std::move(value));
}

bool Object::set_attribute(const std::string&, Value) {
  return false;
}
std::string Object::repr() const {
  return fmt::format("<{} object>", type_name());
}

const Value* CallArgs::keyword(std::string_view name) const {
  for (const auto& [k, v] : keywords)
    if (k == name) return &v;
  return nullptr;
}

Value Value::undefined(std::string hint) {
  Value v;
  v.storage_ = UndefinedTag{std::move(hint)};
  return v;
}

Value Value::none() {
  Value v;
  v.storage_ = NoneTag{};
  return v;
}

Value Value::boolean(bool b) {
  Value v;
  v.storage_ = b;
  return v;
}

Value Value::integer(int64_t i) {
  Value v;
  v.storage_ = i;
  return v;
}

Value Value::number(double d) {
  Value v;
  v.storage_ = d;
  return v;
}

Value Value::string(std::string s, bool markup) {
  Value v;
  v.storage_ = std::move(s);
  v.markup_ = markup;
  return v;
}

Value Value::list(std::vector<Value> items, bool tuple) {
  Value v;
  v.storage_ = std::make_shared<const ListData>(ListData{std::move(items), tuple});
  return v;
}

Value Value::dict(DictData d) {
  Value v;
  v.storage_ = std::make_shared<const DictData>(std::move(d));
  return v;
}

Value Value::object(std::shared_ptr<Object> o) {
  Value v;
  v.storage_ = std::move(o);
  return v;
}

Value Value::function(std::string name, std::function<Value(const CallArgs&)> call) {
  Value v;
  v.storage_ = std::make_shared<const Function>(Function{std::move(name), std::move(call)});
  return v;
}

int64_t Value::as_int() const {
  return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(storage_);
}

double Value::as_double() const {
  return is_float() ? std::get<double>(storage_) : static_cast<double>(as_int());
}

bool Value::same_object(const Value& other) const {
  if (kind() != other.kind()) return false;
  switch (kind()) {
    case Kind::List:
      return &as_list() == &other.as_list();
    case Kind::Dict:
      return &as_dict() == &other.as_dict();
    case Kind::Object:
      return &as_object() == &other.as_object();
    case Kind::Function:
      return &as_function() == &other.as_function();
    default:
      return equals(*this, other);
  }
}

std::string type_name(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::None:
      return "NoneType";
    case Value::Kind::Bool:
      return "bool";
    case Value::Kind::Int:
      return "int";
    case Value::Kind::Float:
      return "float";
    case Value::Kind::String:
      return "str";
    case Value::Kind::List:
      return v.is_tuple() ? "tuple" : "list";
    case Value::Kind::Dict:
      return "dict";
    case Value::Kind::Object:
      return v.as_object().type_name();
    case Value::Kind::Function:
      return "function";
  }
  return "object";
}

void fail_undefined(const Value& v) {
  const std::string& hint = v.undefined_hint();
  if (hint.rfind("SecurityError: ", 0) == 0) throw EvalError(hint);  // the sandbox's unsafe-attribute marker
  raise("UndefinedError: {}", hint.empty() ? std::string("value is undefined") : hint);
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return false;
    case Value::Kind::Bool:
      return v.as_bool();
    case Value::Kind::Int:
      return v.as_int() != 0;
    case Value::Kind::Float:
      return v.as_double() != 0.0;
    case Value::Kind::String:
      return !v.as_string().empty();
    case Value::Kind::List:
      return !v.as_list().items.empty();
    case Value::Kind::Dict:
      return !v.as_dict().items.empty();
    default:
      return true;
  }
}

static std::string join_repr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    out += repr(items[i]);
  }
  return out;
}

std::string repr(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "Undefined";
    case Value::Kind::String:
      return text::repr_string(v.as_string());
    case Value::Kind::List: {
      const ListData& list = v.as_list();
      if (!list.tuple) return fmt::format("[{}]", join_repr(list.items));
      return fmt::format("({}{}", join_repr(list.items), list.items.size() == 1 ? ",)" : ")");
    }
    case Value::Kind::Dict: {
      std::string out = "{";
      bool first = true;
      for (const auto& [k, item] : v.as_dict().items) {
        if (!first) out += ", ";
        first = false;
        out += fmt::format("{}: {}", text::repr_string(k), repr(item));
      }
      return out + "}";
    }
    default:
      return to_str(v);
  }
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return "";
    case Value::Kind::None:
      return "None";
    case Value::Kind::Bool:
      return v.as_bool() ? "True" : "False";
    case Value::Kind::Int:
      return std::to_string(v.as_int());
    case Value::Kind::Float:
      return text::repr_float(v.as_double());
    case Value::Kind::String:
      return v.as_string();
    case Value::Kind::Object:
      return v.as_object().repr();
    case Value::Kind::Function:
      return fmt::format("<function {}>", v.as_function().name);
    default:
      return repr(v);
  }
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::Undefined:
    case Value::Kind::None:
      return true;
    case Value::Kind::String:
      return a.as_string() == b.as_string();
    case Value::Kind::List: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.tuple != y.tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!equals(x.items[i], y.items[i])) return false;
      return true;
    }
    case Value::Kind::Dict: {
      const auto& x = a.as_dict();
      const auto& y = b.as_dict();
      if (x.items.size() != y.items.size()) return false;
      for (const auto& [k, item] : x.items) {
        const Value* other = y.find(k);
        if (!other || !equals(item, *other)) return false;
      }
      return true;
    }
    default:
      return a.same_object(b);
  }
}

int compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // UTF-8 byte order is code point order
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  raise("TypeError: '{}' not supported between instances of '{}' and '{}'", op, type_name(a), type_name(b));
}

size_t length(const Value& v) {
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return 0;
    case Value::Kind::String:
      return text::codepoint_count(v.as_string());
    case Value::Kind::List:
      return v.as_list().items.size();
    case Value::Kind::Dict:
      return v.as_dict().items.size();
    default:
      raise("TypeError: object of type '{}' has no len()", type_name(v));
  }
}

std::vector<Value> iterate(const Value& v) {
  std::vector<Value> out;
  switch (v.kind()) {
    case Value::Kind::Undefined:
      return out;
    case Value::Kind::List:
      return v.as_list().items;
    case Value::Kind::Dict:
      for (const auto& [k, item] : v.as_dict().items) out.push_back(Value::string(k));
      return out;
    case Value::Kind::String:
      for (char32_t c : text::decode(v.as_string()))
        out.push_back(Value::string(text::encode(std::u32string(1, c))));
      return out;
    default:
      raise("TypeError: '{}' object is not iterable", type_name(v));
  }
}

bool contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::Undefined:
      return false;
    case Value::Kind::String:
      if (!needle.is_string()) {
        if (needle.is_undefined()) fail_undefined(needle);
        raise("TypeError: 'in <string>' requires string as left operand, not {}", type_name(needle));
      }
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::List:
      for (const Value& item : haystack.as_list().items)
        if (equals(item, needle)) return true;
      return false;
    case Value::Kind::Dict:
      return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
    default:
      raise("TypeError: argument of type '{}' is not iterable", type_name(haystack));
  }
}

}  // namespace ds::jinja
