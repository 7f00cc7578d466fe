#include "tokenizer/jinja_filters.h"

#include <algorithm>
#include <cmath>
#include <unordered_map>

#include "tokenizer/jinja_json.h"
#include "tokenizer/jinja_methods.h"
#include "tokenizer/jinja_text.h"

namespace ds::jinja {

namespace {

using FilterFn = Value (*)(const Value&, const CallArgs&);

const Value* arg(const CallArgs& args, size_t i, std::string_view kw) {
  return argument(args, i, kw);
}

Value str_value(const Value& v) {
  return v.is_markup() ? v : Value::string(to_str(v));
}

// `attribute="a.b"` and `attribute=0` paths used by sort, map, selectattr, join, sum, unique, min and max.
Value attribute_path(const Value& item, const Value* attribute) {
  if (!attribute || attribute->is_none()) return item;
  if (attribute->is_int()) return get_item(item, *attribute);
  Value v = item;
  for (const std::string& part : text::split(to_str(*attribute), std::string("."), -1)) {
    bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), [](char c) { return c >= '0' && c <= '9'; });
    v = digits ? get_item(v, Value::integer(std::stoll(part))) : get_item(v, Value::string(part));
  }
  return v;
}

// Case-insensitive sort keys lower strings, as jinja2's ignore_case does.
Value sort_key(const Value& v, bool case_sensitive) {
  return !case_sensitive && v.is_string() ? Value::string(text::lower(v.as_string())) : v;
}

Value f_default(const Value& v, const CallArgs& args) {
  bool boolean = bool_argument(args, 1, "boolean", false);
  if (v.is_undefined() || (boolean && !truthy(v))) {
    const Value* d = arg(args, 0, "default_value");
    return d ? *d : Value::string("");
  }
  return v;
}

Value f_length(const Value& v, const CallArgs&) {
  return Value::integer(static_cast<int64_t>(length(v)));
}

Value f_trim(const Value& v, const CallArgs& args) {
  const Value* chars = arg(args, 0, "chars");
  std::optional<std::string> set;
  if (chars && !chars->is_none()) set = to_str(*chars);
  return Value::string(text::strip(to_str(v), set, true, true));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
Value f_tojson(const Value& v, const CallArgs& args) {
  JsonStyle style;
  style.ensure_ascii = bool_argument(args, 0, "ensure_ascii", false);
  const Value* indent = arg(args, 1, "indent");
  if (indent && !indent->is_none()) {
    if (indent->is_string())
      style.indent = indent->as_string();
    else
      style.indent = std::string(static_cast<size_t>(std::max<int64_t>(0, indent->as_int())), ' ');
    style.item_separator.assign(1, ',');  // assign(const char*) trips GCC 12 -Wrestrict
  }
  if (const Value* seps = arg(args, 2, "separators"); seps && !seps->is_none()) {
    std::vector<Value> pair = iterate(*seps);
    if (pair.size() != 2) raise("ValueError: separators must be an (item_separator, key_separator) pair");
    style.item_separator = to_str(pair[0]);
    style.key_separator = to_str(pair[1]);
  }
  style.sort_keys = bool_argument(args, 3, "sort_keys", false);
  return Value::string(to_json(v, style));
}

Value f_string(const Value& v, const CallArgs&) {
  return str_value(v);
}
Value f_safe(const Value& v, const CallArgs&) {
  return Value::string(to_str(v), true);
}
Value f_escape(const Value& v, const CallArgs&) {
  return v.is_markup() ? v : Value::string(text::html_escape(to_str(v)), true);
}
Value f_lower(const Value& v, const CallArgs&) {
  return Value::string(text::lower(to_str(v)));
}
Value f_upper(const Value& v, const CallArgs&) {
  return Value::string(text::upper(to_str(v)));
}
Value f_title(const Value& v, const CallArgs&) {
  return Value::string(text::title(to_str(v)));
}
Value f_capitalize(const Value& v, const CallArgs&) {
  return Value::string(text::capitalize(to_str(v)));
}

Value f_replace(const Value& v, const CallArgs& args) {
  const Value* old = arg(args, 0, "old");
  const Value* replacement = arg(args, 1, "new");
  if (!old || !replacement) raise("TypeError: replace() needs 'old' and 'new'");
  return Value::string(
      text::replace(to_str(v), to_str(*old), to_str(*replacement), int_argument(args, 2, "count", -1)));
}

Value f_join(const Value& v, const CallArgs& args) {
  const Value* sep = arg(args, 0, "d");
  std::string separator = sep ? to_str(*sep) : "";
  std::string out;
  bool first = true;
  for (const Value& item : iterate(v)) {
    if (!first) out += separator;
    first = false;
    out += to_str(attribute_path(item, arg(args, 1, "attribute")));
  }
  return Value::string(out);
}

Value f_first(const Value& v, const CallArgs&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No first item, sequence was empty.") : items.front();
}

Value f_last(const Value& v, const CallArgs&) {
  std::vector<Value> items = iterate(v);
  return items.empty() ? Value::undefined("No last item, sequence was empty.") : items.back();
}

Value f_list(const Value& v, const CallArgs&) {
  return Value::list(iterate(v));
}

Value f_items(const Value& v, const CallArgs&) {
  if (v.is_undefined()) return Value::list({});
  if (!v.is_dict()) raise("TypeError: Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, item] : v.as_dict().items) out.push_back(Value::list({Value::string(k), item}, true));
  return Value::list(std::move(out));
}

// Python int(str, base) accepts surrounding whitespace, a sign and underscores between digits.
std::optional<int64_t> parse_int(const std::string& s, int base) {
  std::string t = text::strip(s, std::nullopt, true, true);
  std::string digits;
  for (char c : t)
    if (c != '_') digits.push_back(c);
  if (digits.empty() || t.front() == '_' || t.back() == '_') return std::nullopt;
  size_t pos = 0;
  int64_t out = 0;
  try {
    out = std::stoll(digits, &pos, base);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (pos != digits.size()) return std::nullopt;
  return out;
}

std::optional<double> parse_float(const std::string& s) {
  std::string t = text::strip(s, std::nullopt, true, true);
  if (t.empty()) return std::nullopt;
  size_t pos = 0;
  double d = 0;
  try {
    d = std::stod(t, &pos);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (pos != t.size()) return std::nullopt;
  return d;
}

Value f_int(const Value& v, const CallArgs& args) {
  Value fallback = arg(args, 0, "default") ? *arg(args, 0, "default") : Value::integer(0);
  int base = static_cast<int>(int_argument(args, 1, "base", 10));
  if (v.is_int() || v.is_bool()) return Value::integer(v.as_int());
  if (v.is_float()) {
    if (!std::isfinite(v.as_double())) return fallback;
    return Value::integer(static_cast<int64_t>(v.as_double()));
  }
  if (v.is_string()) {
    if (auto i = parse_int(v.as_string(), base)) return Value::integer(*i);
    if (auto d = parse_float(v.as_string()); d && std::isfinite(*d))
      return Value::integer(static_cast<int64_t>(*d));
  }
  return fallback;
}

Value f_float(const Value& v, const CallArgs& args) {
  Value fallback = arg(args, 0, "default") ? *arg(args, 0, "default") : Value::number(0.0);
  if (v.is_number()) return Value::number(v.as_double());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value::number(*d);
  return fallback;
}

Value f_abs(const Value& v, const CallArgs&) {
  if (v.is_float()) return Value::number(std::fabs(v.as_double()));
  if (v.is_int() || v.is_bool()) return Value::integer(std::llabs(v.as_int()));
  raise("TypeError: bad operand type for abs(): '{}'", type_name(v));
}

Value f_round(const Value& v, const CallArgs& args) {
  int64_t precision = int_argument(args, 0, "precision", 0);
  const Value* method_arg = arg(args, 1, "method");
  std::string method = method_arg ? to_str(*method_arg) : "common";
  if (!v.is_number()) raise("TypeError: type {} doesn't define __round__ method", type_name(v));
  double x = v.as_double(), scale = std::pow(10.0, static_cast<double>(precision));
  if (method == "floor") return Value::number(std::floor(x * scale) / scale);
  if (method == "ceil") return Value::number(std::ceil(x * scale) / scale);
  if (method != "common") raise("TypeError: method must be common, ceil or floor");
  if (!v.is_float()) return Value::integer(v.as_int());
  // Python's round() rounds the exact binary value half-to-even, which is what %.Nf printing does.
  std::string s = fmt::format("{:.{}f}", x, std::max<int64_t>(0, precision));
  return Value::number(std::stod(s));
}

Value f_reverse(const Value& v, const CallArgs&) {
  if (v.is_string()) {
    std::u32string cps = text::decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value::string(text::encode(cps));
  }
  std::vector<Value> items = iterate(v);
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

Value f_sort(const Value& v, const CallArgs& args) {
  bool reverse = bool_argument(args, 0, "reverse", false);
  bool case_sensitive = bool_argument(args, 1, "case_sensitive", false);
  const Value* attribute = arg(args, 2, "attribute");
  std::vector<Value> items = iterate(v);
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    Value ka = sort_key(attribute_path(a, attribute), case_sensitive);
    Value kb = sort_key(attribute_path(b, attribute), case_sensitive);
    return reverse ? compare(kb, ka, "<") < 0 : compare(ka, kb, "<") < 0;
  });
  return Value::list(std::move(items));
}

Value f_dictsort(const Value& v, const CallArgs& args) {
  bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* by = arg(args, 1, "by");
  bool by_value = by && to_str(*by) == "value";
  bool reverse = bool_argument(args, 2, "reverse", false);
  std::vector<Value> items = f_items(v, CallArgs{}).as_list().items;
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    Value ka = sort_key(a.as_list().items[by_value ? 1 : 0], case_sensitive);
    Value kb = sort_key(b.as_list().items[by_value ? 1 : 0], case_sensitive);
    return reverse ? compare(kb, ka, "<") < 0 : compare(ka, kb, "<") < 0;
  });
  return Value::list(std::move(items));
}

Value f_unique(const Value& v, const CallArgs& args) {
  bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* attribute = arg(args, 1, "attribute");
  std::vector<Value> out, seen;
  for (const Value& item : iterate(v)) {
    Value key = sort_key(attribute_path(item, attribute), case_sensitive);
    if (std::any_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) continue;
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value min_max(const Value& v, const CallArgs& args, bool want_max) {
  bool case_sensitive = bool_argument(args, 0, "case_sensitive", false);
  const Value* attribute = arg(args, 1, "attribute");
  std::vector<Value> items = iterate(v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    int c = compare(sort_key(attribute_path(items[i], attribute), case_sensitive),
                    sort_key(attribute_path(items[best], attribute), case_sensitive), want_max ? ">" : "<");
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}
Value f_min(const Value& v, const CallArgs& args) {
  return min_max(v, args, false);
}
Value f_max(const Value& v, const CallArgs& args) {
  return min_max(v, args, true);
}

Value f_sum(const Value& v, const CallArgs& args) {
  const Value* attribute = arg(args, 0, "attribute");
  Value total = arg(args, 1, "start") ? *arg(args, 1, "start") : Value::integer(0);
  for (const Value& item : iterate(v)) {
    Value x = attribute_path(item, attribute);
    if (!x.is_number() || !total.is_number()) raise("TypeError: unsupported operand type(s) for +");
    total = total.is_float() || x.is_float() ? Value::number(total.as_double() + x.as_double())
                                             : Value::integer(total.as_int() + x.as_int());
  }
  return total;
}

// map/select/reject/selectattr/rejectattr: the name and extra arguments of the filter or test to apply.
CallArgs rest_args(const CallArgs& args, size_t skip) {
  CallArgs rest;
  for (size_t i = skip; i < args.positional.size(); ++i) rest.positional.push_back(args.positional[i]);
  rest.keywords = args.keywords;
  return rest;
}

Value f_map(const Value& v, const CallArgs& args) {
  std::vector<Value> out;
  const Value* attribute = args.keyword("attribute");
  if (attribute) {
    const Value* fallback = args.keyword("default");
    for (const Value& item : iterate(v)) {
      Value x = attribute_path(item, attribute);
      out.push_back(x.is_undefined() && fallback ? *fallback : x);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) raise("FilterArgumentError: map requires a filter argument");
  std::string name = to_str(args.positional[0]);
  if (!is_known_filter(name)) raise("TemplateRuntimeError: No filter named '{}'.", name);
  CallArgs rest = rest_args(args, 1);
  for (const Value& item : iterate(v)) out.push_back(apply_filter(name, item, rest));
  return Value::list(std::move(out));
}

Value select_items(const Value& v, const CallArgs& args, bool by_attribute, bool keep) {
  size_t skip = by_attribute ? 1 : 0;
  const Value* attribute = by_attribute ? arg(args, 0, "") : nullptr;
  std::optional<std::string> test;
  if (args.positional.size() > skip) test = to_str(args.positional[skip]);
  if (test && !is_known_test(*test)) raise("TemplateRuntimeError: No test named '{}'.", *test);
  CallArgs rest = rest_args(args, skip + 1);
  std::vector<Value> out;
  for (const Value& item : iterate(v)) {
    Value x = by_attribute ? attribute_path(item, attribute) : item;
    bool passed = test ? apply_test(*test, x, rest) : truthy(x);
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}
Value f_select(const Value& v, const CallArgs& a) {
  return select_items(v, a, false, true);
}
Value f_reject(const Value& v, const CallArgs& a) {
  return select_items(v, a, false, false);
}
Value f_selectattr(const Value& v, const CallArgs& a) {
  return select_items(v, a, true, true);
}
Value f_rejectattr(const Value& v, const CallArgs& a) {
  return select_items(v, a, true, false);
}

Value f_attr(const Value& v, const CallArgs& args) {
  const Value* name = arg(args, 0, "name");
  return name ? get_attribute(v, to_str(*name)) : Value();
}

Value f_center(const Value& v, const CallArgs& args) {
  CallArgs width;
  width.positional.push_back(Value::integer(int_argument(args, 0, "width", 80)));
  return get_attribute(Value::string(to_str(v)), "center").as_function().call(width);
}

Value f_indent(const Value& v, const CallArgs& args) {
  const Value* width = arg(args, 0, "width");
  std::string indention = width && width->is_string()
                              ? width->as_string()
                              : std::string(width ? static_cast<size_t>(width->as_int()) : 4, ' ');
  bool first = bool_argument(args, 1, "first", false);
  bool blank = bool_argument(args, 2, "blank", false);
  Value lines_value =
      get_attribute(Value::string(to_str(v) + "\n"), "splitlines").as_function().call(CallArgs{});
  std::vector<Value> lines = lines_value.as_list().items;
  std::string out;
  if (blank) {
    for (size_t i = 0; i < lines.size(); ++i)
      out += fmt::format("{}{}", i ? "\n" + indention : "", lines[i].as_string());
  } else {
    out = lines.empty() ? "" : lines[0].as_string();
    for (size_t i = 1; i < lines.size(); ++i) {
      const std::string& line = lines[i].as_string();
      out += "\n" + (line.empty() ? line : indention + line);
    }
  }
  return Value::string(first ? indention + out : out);
}

Value f_wordcount(const Value& v, const CallArgs&) {
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : text::decode(to_str(v))) {
    bool word = c == '_' || (c >= '0' && c <= '9') || ((c | 32) >= 'a' && (c | 32) <= 'z') || c >= 0x80;
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value::integer(words);
}

Value f_format(const Value& v, const CallArgs& args) {
  if (!args.keywords.empty()) {
    DictData kw;
    for (const auto& [k, x] : args.keywords) kw.set(k, x);
    return Value::string(percent_format(to_str(v), Value::dict(std::move(kw))));
  }
  return Value::string(percent_format(to_str(v), Value::list(args.positional, true)));
}

Value f_count(const Value& v, const CallArgs& a) {
  return f_length(v, a);
}

const std::unordered_map<std::string_view, FilterFn>& filters() {
  static const std::unordered_map<std::string_view, FilterFn> table = {{"abs", f_abs},
                                                                       {"attr", f_attr},
                                                                       {"capitalize", f_capitalize},
                                                                       {"center", f_center},
                                                                       {"count", f_count},
                                                                       {"d", f_default},
                                                                       {"default", f_default},
                                                                       {"dictsort", f_dictsort},
                                                                       {"e", f_escape},
                                                                       {"escape", f_escape},
                                                                       {"first", f_first},
                                                                       {"float", f_float},
                                                                       {"format", f_format},
                                                                       {"indent", f_indent},
                                                                       {"int", f_int},
                                                                       {"items", f_items},
                                                                       {"join", f_join},
                                                                       {"last", f_last},
                                                                       {"length", f_length},
                                                                       {"list", f_list},
                                                                       {"lower", f_lower},
                                                                       {"map", f_map},
                                                                       {"max", f_max},
                                                                       {"min", f_min},
                                                                       {"reject", f_reject},
                                                                       {"rejectattr", f_rejectattr},
                                                                       {"replace", f_replace},
                                                                       {"reverse", f_reverse},
                                                                       {"round", f_round},
                                                                       {"safe", f_safe},
                                                                       {"select", f_select},
                                                                       {"selectattr", f_selectattr},
                                                                       {"sort", f_sort},
                                                                       {"string", f_string},
                                                                       {"sum", f_sum},
                                                                       {"title", f_title},
                                                                       {"tojson", f_tojson},
                                                                       {"trim", f_trim},
                                                                       {"unique", f_unique},
                                                                       {"upper", f_upper},
                                                                       {"wordcount", f_wordcount}};
  return table;
}

bool is_mapping(const Value& v) {
  return v.is_dict();
}
bool is_iterable(const Value& v) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return filters().count(name) != 0;
}

Value apply_filter(std::string_view name, const Value& input, const CallArgs& args) {
  auto it = filters().find(name);
  if (it == filters().end()) raise("TemplateRuntimeError: No filter named '{}'.", name);
  // Filters other than default/d use their input, so an Undefined input fails as jinja2's does when used.
  return it->second(input, args);
}

bool is_known_test(std::string_view name) {
  static const char* names[] = {
      "defined",  "undefined", "none",    "boolean",  "false",       "true",        "integer", "float",
      "number",   "string",    "mapping", "iterable", "sequence",    "callable",    "sameas",  "escaped",
      "lower",    "upper",     "eq",      "equalto",  "==",          "ne",          "!=",      "lt",
      "lessthan", "<",         "le",      "<=",       "gt",          "greaterthan", ">",       "ge",
      ">=",       "in",        "odd",     "even",     "divisibleby", "filter",      "test"};
  return std::find(std::begin(names), std::end(names), name) != std::end(names);
}

bool apply_test(std::string_view name, const Value& v, const CallArgs& args) {
  const Value* other = arg(args, 0, "");
  auto need_other = [&]() -> const Value& {
    if (!other) raise("TypeError: test '{}' needs an argument", name);
    return *other;
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "integer") return v.is_int();
  if (name == "float") return v.is_float();
  if (name == "number") return v.is_number();
  if (name == "string") return v.is_string();
  if (name == "mapping") return is_mapping(v);
  if (name == "iterable") return is_iterable(v);
  if (name == "sequence") return is_iterable(v);  // str, list, tuple, dict and Undefined all have len and []
  if (name == "callable") return v.is_function();
  if (name == "escaped") return v.is_markup();
  if (name == "sameas") return v.same_object(need_other());
  if (name == "lower" || name == "upper") {
    std::string s = to_str(v);
    bool cased =
        std::any_of(s.begin(), s.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)); });
    return cased && (name == "lower" ? text::lower(s) == s : text::upper(s) == s);
  }
  if (name == "eq" || name == "equalto" || name == "==") return equals(v, need_other());
  if (name == "ne" || name == "!=") return !equals(v, need_other());
  if (name == "lt" || name == "lessthan" || name == "<") return compare(v, need_other(), "<") < 0;
  if (name == "le" || name == "<=") return compare(v, need_other(), "<=") <= 0;
  if (name == "gt" || name == "greaterthan" || name == ">") return compare(v, need_other(), ">") > 0;
  if (name == "ge" || name == ">=") return compare(v, need_other(), ">=") >= 0;
  if (name == "in") return contains(need_other(), v);
  if (name == "odd" || name == "even" || name == "divisibleby") {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_int() && !v.is_bool())
      raise("TypeError: test '{}' needs an integer, got {}", name, type_name(v));
    int64_t n = name == "divisibleby" ? int_argument(args, 0, "num", 1) : 2;
    if (n == 0) raise("ZeroDivisionError: integer division or modulo by zero");
    int64_t r = ((v.as_int() % n) + n) % n;
    return name == "odd" ? r == 1 : r == 0;
  }
  if (name == "filter") return is_known_filter(to_str(need_other()));
  if (name == "test") return is_known_test(to_str(need_other()));
  raise("TemplateRuntimeError: No test named '{}'.", name);
}

}  // namespace ds::jinja
