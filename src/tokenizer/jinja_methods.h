#pragma once
// Attribute and item lookup as jinja2's ImmutableSandboxedEnvironment does it, the str/dict/list methods that
// lookup can return, and the globals transformers provides (range, dict, namespace, raise_exception, ...).
#include <string>

#include "tokenizer/jinja_value.h"

namespace ds::jinja {

// `obj.name`: a method of str/dict/list first, then obj["name"]; Undefined when neither exists.
Value get_attribute(const Value& obj, const std::string& name);
// `obj[key]`: the item first, then (for string keys) a method; Undefined when neither exists.
Value get_item(const Value& obj, const Value& key);
// `obj[start:stop:step]` on strings, lists and tuples.
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step);

// The names every template can see unless the context shadows them.
DictData make_globals();

// `"fmt" % args` and the `format` filter: printf-style formatting as Python's str % does it.
std::string percent_format(const std::string& format, const Value& args);

// Argument helpers shared by methods, filters and globals.
const Value* argument(const CallArgs& args, size_t index, std::string_view keyword);
int64_t int_argument(const CallArgs& args, size_t index, std::string_view keyword, int64_t fallback);
bool bool_argument(const CallArgs& args, size_t index, std::string_view keyword, bool fallback);

}  // namespace ds::jinja
