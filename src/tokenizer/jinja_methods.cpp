#include "tokenizer/jinja_methods.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "tokenizer/jinja_text.h"

namespace ds::jinja {

const Value* argument(const CallArgs& args, size_t index, std::string_view keyword) {
  if (index < args.positional.size()) return &args.positional[index];
  return keyword.empty() ? nullptr : args.keyword(keyword);
}

int64_t int_argument(const CallArgs& args, size_t index, std::string_view keyword, int64_t fallback) {
  const Value* v = argument(args, index, keyword);
  if (!v || v->is_none()) return fallback;
  if (!v->is_int() && !v->is_bool())
    raise("TypeError: '{}' object cannot be interpreted as an integer", type_name(*v));
  return v->as_int();
}

bool bool_argument(const CallArgs& args, size_t index, std::string_view keyword, bool fallback) {
  const Value* v = argument(args, index, keyword);
  return v ? truthy(*v) : fallback;
}

namespace {

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attribute(const Value& obj, const std::string& name) {
  return Value::undefined(fmt::format("'{}' has no attribute '{}'", object_type_repr(obj), name));
}

Value unsafe(const Value& obj, const std::string& name) {
  return Value::undefined(
      fmt::format("SecurityError: access to attribute '{}' of '{}' object is unsafe.", name, type_name(obj)));
}

std::optional<std::string> optional_string(const CallArgs& args, size_t index, std::string_view keyword) {
  const Value* v = argument(args, index, keyword);
  if (!v || v->is_none()) return std::nullopt;
  if (!v->is_string()) raise("TypeError: expected str, got {}", type_name(*v));
  return v->as_string();
}

std::string string_argument(const CallArgs& args, size_t index, std::string_view keyword,
                            std::string_view method) {
  const Value* v = argument(args, index, keyword);
  if (!v) raise("TypeError: {}() is missing an argument", method);
  if (!v->is_string()) raise("TypeError: {}() argument must be str, not {}", method, type_name(*v));
  return v->as_string();
}

Value string_list(const std::vector<std::string>& parts) {
  std::vector<Value> items;
  for (const auto& p : parts) items.push_back(Value::string(p));
  return Value::list(std::move(items));
}

// startswith/endswith accept a str or a tuple of str.
bool affix_match(const std::string& s, const Value& affix, bool prefix) {
  auto one = [&](const Value& a) {
    if (!a.is_string())
      raise("TypeError: {} first arg must be str or a tuple of str, not {}",
            prefix ? "startswith" : "endswith", type_name(a));
    const std::string& x = a.as_string();
    if (x.size() > s.size()) return false;
    return prefix ? s.compare(0, x.size(), x) == 0 : s.compare(s.size() - x.size(), x.size(), x) == 0;
  };
  if (affix.is_tuple()) {
    for (const Value& a : affix.as_list().items)
      if (one(a)) return true;
    return false;
  }
  return one(affix);
}

int64_t codepoint_index(const std::string& s, size_t byte_pos) {
  return static_cast<int64_t>(text::codepoint_count(std::string_view(s).substr(0, byte_pos)));
}

std::string pad(const std::string& s, int64_t width, const std::string& fill, int where) {
  int64_t n = static_cast<int64_t>(text::codepoint_count(s));
  if (width <= n) return s;
  int64_t total = width - n;
  int64_t left = where < 0 ? 0 : where > 0 ? total : total / 2 + (total & width & 1);
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += s;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

bool all_chars(const std::string& s, bool (*pred)(char32_t)) {
  std::u32string cps = text::decode(s);
  return !cps.empty() && std::all_of(cps.begin(), cps.end(), pred);
}

std::string format_method(const std::string& s, const CallArgs& args);

Value string_method(const std::string& s, const std::string& name, const CallArgs& args) {
  if (name == "startswith" || name == "endswith") {
    const Value* affix = argument(args, 0, "");
    if (!affix) raise("TypeError: {}() takes at least 1 argument (0 given)", name);
    return Value::boolean(affix_match(s, *affix, name == "startswith"));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip")
    return Value::string(text::strip(s, optional_string(args, 0, ""), name != "rstrip", name != "lstrip"));
  if (name == "split" || name == "rsplit") {
    auto sep = optional_string(args, 0, "sep");
    int64_t maxsplit = int_argument(args, 1, "maxsplit", -1);
    return string_list(name == "split" ? text::split(s, sep, maxsplit) : text::rsplit(s, sep, maxsplit));
  }
  if (name == "splitlines") {
    std::vector<std::string> lines;
    std::u32string cps = text::decode(s);
    bool keep = bool_argument(args, 0, "keepends", false);
    std::u32string line;
    for (size_t i = 0; i < cps.size(); ++i) {
      char32_t c = cps[i];
      bool brk = c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || (c >= 0x1C && c <= 0x1E) || c == 0x85 ||
                 c == 0x2028 || c == 0x2029;
      if (!brk) {
        line.push_back(c);
        continue;
      }
      std::u32string ending(1, c);
      if (c == '\r' && i + 1 < cps.size() && cps[i + 1] == '\n') ending.push_back(cps[++i]);
      lines.push_back(text::encode(keep ? line + ending : line));
      line.clear();
    }
    if (!line.empty()) lines.push_back(text::encode(line));
    return string_list(lines);
  }
  if (name == "replace")
    return Value::string(text::replace(s, string_argument(args, 0, "", name),
                                       string_argument(args, 1, "", name),
                                       int_argument(args, 2, "count", -1)));
  if (name == "upper") return Value::string(text::upper(s));
  if (name == "lower" || name == "casefold") return Value::string(text::lower(s));
  if (name == "title") return Value::string(text::title(s));
  if (name == "capitalize") return Value::string(text::capitalize(s));
  if (name == "swapcase") {
    std::string out = s;
    for (char& c : out)
      c = std::islower(static_cast<unsigned char>(c)) ? static_cast<char>(std::toupper(c))
                                                      : static_cast<char>(std::tolower(c));
    return Value::string(out);
  }
  if (name == "format") return Value::string(format_method(s, args));
  if (name == "join") {
    const Value* items = argument(args, 0, "");
    if (!items) raise("TypeError: join() takes exactly one argument (0 given)");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(*items)) {
      if (!item.is_string())
        raise("TypeError: sequence item: expected str instance, {} found", type_name(item));
      if (!first) out += s;
      first = false;
      out += item.as_string();
    }
    return Value::string(out);
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    std::string sub = string_argument(args, 0, "", name);
    if (name == "count") {
      if (sub.empty()) return Value::integer(static_cast<int64_t>(text::codepoint_count(s)) + 1);
      int64_t n = 0;
      for (size_t at = s.find(sub); at != std::string::npos; at = s.find(sub, at + sub.size())) ++n;
      return Value::integer(n);
    }
    size_t at = name[0] == 'r' ? s.rfind(sub) : s.find(sub);
    if (at == std::string::npos) {
      if (name == "index" || name == "rindex") raise("ValueError: substring not found");
      return Value::integer(-1);
    }
    return Value::integer(codepoint_index(s, at));
  }
  if (name == "partition" || name == "rpartition") {
    std::string sep = string_argument(args, 0, "", name);
    if (sep.empty()) raise("ValueError: empty separator");
    size_t at = name == "partition" ? s.find(sep) : s.rfind(sep);
    std::vector<Value> parts;
    if (at == std::string::npos) {
      parts = name == "partition"
                  ? std::vector<Value>{Value::string(s), Value::string(""), Value::string("")}
                  : std::vector<Value>{Value::string(""), Value::string(""), Value::string(s)};
    } else {
      parts = {Value::string(s.substr(0, at)), Value::string(sep), Value::string(s.substr(at + sep.size()))};
    }
    return Value::list(std::move(parts), true);
  }
  if (name == "removeprefix" || name == "removesuffix") {
    std::string affix = string_argument(args, 0, "", name);
    if (affix_match(s, Value::string(affix), name == "removeprefix"))
      return Value::string(name == "removeprefix" ? s.substr(affix.size())
                                                  : s.substr(0, s.size() - affix.size()));
    return Value::string(s);
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    auto fill = optional_string(args, 1, "").value_or(" ");
    return Value::string(pad(s, int_argument(args, 0, "", 0), fill,
                             name == "center"  ? 0
                             : name == "ljust" ? -1
                                               : 1));
  }
  if (name == "zfill") {
    int64_t width = int_argument(args, 0, "", 0);
    bool sign = !s.empty() && (s[0] == '+' || s[0] == '-');
    std::string body = sign ? s.substr(1) : s;
    std::string out = pad(body, width - (sign ? 1 : 0), "0", 1);
    return Value::string(sign ? s.substr(0, 1) + out : out);
  }
  if (name == "isspace") return Value::boolean(all_chars(s, text::is_space));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric")
    return Value::boolean(all_chars(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
  if (name == "isalpha")
    return Value::boolean(all_chars(s, [](char32_t c) { return (c | 32) >= 'a' && (c | 32) <= 'z'; }));
  if (name == "isalnum")
    return Value::boolean(all_chars(
        s, [](char32_t c) { return ((c | 32) >= 'a' && (c | 32) <= 'z') || (c >= '0' && c <= '9'); }));
  if (name == "isascii")
    return Value::boolean(std::all_of(s.begin(), s.end(), [](char c) { return (c & 0x80) == 0; }));
  if (name == "islower" || name == "isupper") {
    bool cased =
        std::any_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
    return Value::boolean(cased && (name == "islower" ? text::lower(s) == s : text::upper(s) == s));
  }
  raise("AttributeError: str.{} is not supported in chat templates", name);
}

bool is_string_method(const std::string& name) {
  static const char* names[] = {
      "startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit", "splitlines", "replace",
      "upper", "lower", "casefold", "title", "capitalize", "swapcase", "format", "join", "find", "rfind",
      "index", "rindex", "count", "partition", "rpartition", "removeprefix", "removesuffix", "center",
      "ljust", "rjust", "zfill", "isspace", "isdigit", "isdecimal", "isnumeric", "isalpha", "isalnum",
      "isascii", "islower", "isupper",
      // Python has these too; asking for them fails loudly rather than printing nothing.
      "encode", "expandtabs", "format_map", "isidentifier", "isprintable", "istitle", "maketrans",
      "translate"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

// str.format: {} / {0} / {name} fields, !r and !s conversions; format specs are not supported.
std::string format_method(const std::string& s, const CallArgs& args) {
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    if (c == '}' && i + 1 < s.size() && s[i + 1] == '}') {
      out.push_back('}');
      ++i;
      continue;
    }
    if (c != '{') {
      out.push_back(c);
      continue;
    }
    if (i + 1 < s.size() && s[i + 1] == '{') {
      out.push_back('{');
      ++i;
      continue;
    }
    size_t close = s.find('}', i);
    if (close == std::string::npos) raise("ValueError: Single '{{' encountered in format string");
    std::string field = s.substr(i + 1, close - i - 1);
    char conversion = 0;
    if (size_t bang = field.find('!'); bang != std::string::npos) {
      conversion = bang + 1 < field.size() ? field[bang + 1] : 0;
      field.resize(bang);
    }
    if (field.find(':') != std::string::npos)
      raise("ValueError: format specs in str.format are not supported");
    const Value* v = nullptr;
    if (field.empty()) {
      v = argument(args, auto_index++, "");
    } else if (std::all_of(field.begin(), field.end(),
                           [](char d) { return std::isdigit(static_cast<unsigned char>(d)); })) {
      v = argument(args, std::stoul(field), "");
    } else {
      v = args.keyword(field);
    }
    if (!v) raise("IndexError: Replacement index {} out of range for positional args tuple", field);
    out += conversion == 'r' ? repr(*v) : to_str(*v);
    i = close;
  }
  return out;
}

Value dict_method(const Value& self, const std::string& name, const CallArgs& args) {
  const DictData& dict = self.as_dict();
  if (name == "get") {
    const Value* key = argument(args, 0, "");
    if (!key) raise("TypeError: get expected at least 1 argument, got 0");
    const Value* found = key->is_string() ? dict.find(key->as_string()) : nullptr;
    if (found) return *found;
    const Value* fallback = argument(args, 1, "");
    return fallback ? *fallback : Value::none();
  }
  std::vector<Value> out;
  for (const auto& [k, v] : dict.items) {
    if (name == "keys")
      out.push_back(Value::string(k));
    else if (name == "values")
      out.push_back(v);
    else
      out.push_back(Value::list({Value::string(k), v}, true));
  }
  return Value::list(std::move(out));
}

Value list_method(const Value& self, const std::string& name, const CallArgs& args) {
  const Value* x = argument(args, 0, "");
  if (!x) raise("TypeError: {}() takes exactly one argument (0 given)", name);
  const auto& items = self.as_list().items;
  int64_t count = 0;
  for (size_t i = 0; i < items.size(); ++i) {
    if (!equals(items[i], *x)) continue;
    if (name == "index") return Value::integer(static_cast<int64_t>(i));
    ++count;
  }
  if (name == "index") raise("ValueError: {} is not in list", repr(*x));
  return Value::integer(count);
}

template <typename F>
Value bound(const Value& self, const std::string& name, F method) {
  return Value::function(name,
                         [self, name, method](const CallArgs& args) { return method(self, name, args); });
}

Value method_of(const Value& obj, const std::string& name) {
  if (obj.is_string()) {
    if (!is_string_method(name)) return Value();
    return bound(obj, name, [](const Value& self, const std::string& n, const CallArgs& args) {
      return string_method(self.as_string(), n, args);
    });
  }
  if (obj.is_dict()) {
    if (name == "get" || name == "keys" || name == "values" || name == "items")
      return bound(obj, name, dict_method);
    if (name == "copy") return Value::function(name, [obj](const CallArgs&) { return obj; });
    if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
      return unsafe(obj, name);
  }
  if (obj.is_list()) {
    if (name == "index" || name == "count") return bound(obj, name, list_method);
    if (!obj.is_tuple() && (name == "append" || name == "extend" || name == "insert" || name == "pop" ||
                            name == "remove" || name == "reverse" || name == "sort" || name == "clear"))
      return unsafe(obj, name);
  }
  return Value();
}

}  // namespace

Value get_attribute(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_object()) return obj.as_object().attribute(name);
  Value method = method_of(obj, name);
  if (!method.is_undefined() || !method.undefined_hint().empty()) return method;
  if (obj.is_dict()) {
    if (const Value* item = obj.as_dict().find(name)) return *item;
  }
  return missing_attribute(obj, name);
}

Value get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) fail_undefined(obj);
  if (obj.is_dict() && key.is_string()) {
    if (const Value* item = obj.as_dict().find(key.as_string())) return *item;
  } else if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    int64_t n = static_cast<int64_t>(length(obj));
    int64_t i = key.as_int() < 0 ? key.as_int() + n : key.as_int();
    if (i >= 0 && i < n) {
      if (obj.is_list()) return obj.as_list().items[static_cast<size_t>(i)];
      std::u32string cps = text::decode(obj.as_string());
      return Value::string(text::encode(std::u32string(1, cps[static_cast<size_t>(i)])));
    }
    return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), key.as_int()));
  }
  if (key.is_string()) {
    if (obj.is_object()) return obj.as_object().attribute(key.as_string());
    Value method = method_of(obj, key.as_string());
    if (!method.is_undefined() || !method.undefined_hint().empty()) return method;
    return missing_attribute(obj, key.as_string());
  }
  return Value::undefined(fmt::format("{} has no element {}", object_type_repr(obj), repr(key)));
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step) {
  if (obj.is_undefined()) fail_undefined(obj);
  auto bound_of = [](const Value& v) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_int() && !v.is_bool()) raise("TypeError: slice indices must be integers or None");
    return v.as_int();
  };
  if (obj.is_string()) {
    std::u32string cps = text::decode(obj.as_string());
    std::u32string out;
    for (size_t i : text::slice_positions(static_cast<int64_t>(cps.size()), bound_of(start), bound_of(stop),
                                          bound_of(step)))
      out.push_back(cps[i]);
    return Value::string(text::encode(out));
  }
  if (obj.is_list()) {
    const auto& items = obj.as_list().items;
    std::vector<Value> out;
    for (size_t i : text::slice_positions(static_cast<int64_t>(items.size()), bound_of(start), bound_of(stop),
                                          bound_of(step)))
      out.push_back(items[i]);
    return Value::list(std::move(out), obj.is_tuple());
  }
  return Value::undefined(fmt::format("{} has no element slice", object_type_repr(obj)));
}

namespace {

// transformers' TemplateNamespace: attributes settable with `{% set ns.x = ... %}`, no underscore names.
class Namespace : public Object {
 public:
  std::string type_name() const override { return "Namespace"; }
  Value attribute(const std::string& name) const override {
    if (const Value* v = attrs_.find(name)) return *v;
    return Value::undefined(fmt::format("'Namespace object' has no attribute '{}'", name));
  }
  bool set_attribute(const std::string& name, Value value) override {
    check_name(name);
    attrs_.set(name, std::move(value));
    return true;
  }
  std::string repr() const override {
    return fmt::format("<Namespace {}>", jinja::repr(Value::dict(attrs_)));
  }
  static void check_name(const std::string& name) {
    if (!name.empty() && name[0] == '_')
      raise(
          "SecurityError: Chat templates cannot store underscore-prefixed attributes on a namespace, but got "
          "'{}'. "
          "Please rename the attribute.",
          name);
  }

 private:
  DictData attrs_;
};

// dict(*args, **kwargs) as Python builds it.
DictData build_dict(const CallArgs& args) {
  DictData out;
  if (args.positional.size() > 1)
    raise("TypeError: dict expected at most 1 argument, got {}", args.positional.size());
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      out = source.as_dict();
    } else {
      for (const Value& pair : iterate(source)) {
        std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2)
          raise("ValueError: dictionary update sequence element has length {}; 2 is required", kv.size());
        if (!kv[0].is_string()) raise("TypeError: chat template dicts only support string keys");
        out.set(kv[0].as_string(), kv[1]);
      }
    }
  }
  for (const auto& [k, v] : args.keywords) out.set(k, v);
  return out;
}

}  // namespace

DictData make_globals() {
  DictData g;
  g.set(
      "range", Value::function("range", [](const CallArgs& args) {
        int64_t start = 0, stop = 0, step = 1;
        size_t n = args.positional.size();
        if (n == 1)
          stop = int_argument(args, 0, "", 0);
        else if (n >= 2)
          start = int_argument(args, 0, "", 0), stop = int_argument(args, 1, "", 0);
        if (n == 3) step = int_argument(args, 2, "", 1);
        if (n == 0 || n > 3) raise("TypeError: range expected 1 to 3 arguments, got {}", n);
        if (step == 0) raise("ValueError: range() arg 3 must not be zero");
        std::vector<Value> items;
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
          if (items.size() >= 100000)
            raise("OverflowError: Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
          items.push_back(Value::integer(i));
        }
        return Value::list(std::move(items));
      }));
  g.set("dict", Value::function("dict", [](const CallArgs& args) { return Value::dict(build_dict(args)); }));
  g.set("namespace", Value::function("namespace", [](const CallArgs& args) {
          auto ns = std::make_shared<Namespace>();
          for (const auto& [k, v] : build_dict(args).items) ns->set_attribute(k, v);
          return Value::object(ns);
        }));
  g.set("raise_exception", Value::function("raise_exception", [](const CallArgs& args) -> Value {
          const Value* message = argument(args, 0, "message");
          throw EvalError(message ? to_str(*message) : "");
        }));
  g.set("strftime_now", Value::function("strftime_now", [](const CallArgs& args) {
          const Value* format = argument(args, 0, "format");
          if (!format || !format->is_string()) raise("TypeError: strftime_now() needs a format string");
          std::time_t now = std::time(nullptr);
          std::tm local{};
          localtime_r(&now, &local);
          char buf[512];
          size_t n = std::strftime(buf, sizeof(buf), format->as_string().c_str(), &local);
          return Value::string(std::string(buf, n));
        }));
  return g;
}

std::string percent_format(const std::string& format, const Value& args) {
  std::vector<Value> values = args.is_tuple() ? args.as_list().items : std::vector<Value>{args};
  size_t next = 0;
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%') {
      out.push_back(format[i]);
      continue;
    }
    size_t j = i + 1;
    std::string key;
    if (j < format.size() && format[j] == '(') {
      size_t close = format.find(')', j);
      if (close == std::string::npos) raise("ValueError: incomplete format key");
      key = format.substr(j + 1, close - j - 1);
      j = close + 1;
    }
    std::string spec = "%";
    while (j < format.size() && std::strchr("-+ #0123456789.", format[j])) spec.push_back(format[j++]);
    if (j >= format.size()) raise("ValueError: incomplete format");
    char conv = format[j];
    i = j;
    if (conv == '%') {
      out.push_back('%');
      continue;
    }
    const Value* v = nullptr;
    if (!key.empty()) {
      if (!args.is_dict()) raise("TypeError: format requires a mapping");
      v = args.as_dict().find(key);
      if (!v) raise("KeyError: '{}'", key);
    } else {
      if (next >= values.size()) raise("TypeError: not enough arguments for format string");
      v = &values[next++];
    }
    char buf[512];
    if (conv == 's' || conv == 'r' || conv == 'a') {
      std::string s = conv == 's' ? to_str(*v) : repr(*v);
      std::snprintf(buf, sizeof(buf), (spec + "s").c_str(), s.c_str());
      out += buf;
    } else if (std::strchr("diuxXoc", conv)) {
      if (!v->is_number())
        raise("TypeError: %{} format: a real number is required, not {}", conv, type_name(*v));
      long long n = v->is_float() ? static_cast<long long>(v->as_double()) : v->as_int();
      std::snprintf(buf, sizeof(buf), (spec + "ll" + (conv == 'i' || conv == 'u' ? 'd' : conv)).c_str(), n);
      out += buf;
    } else if (std::strchr("eEfFgG", conv)) {
      if (!v->is_number()) raise("TypeError: must be real number, not {}", type_name(*v));
      std::snprintf(buf, sizeof(buf), (spec + conv).c_str(), v->as_double());
      out += buf;
    } else {
      raise("ValueError: unsupported format character '{}'", conv);
    }
  }
  if (next < values.size() && !args.is_dict())
    raise("TypeError: not all arguments converted during string formatting");
  return out;
}

}  // namespace ds::jinja
