#pragma once
// jinja2's built-in filters and tests (filters.py, tests.py), with transformers' tojson in place of jinja2's.
#include <string_view>

#include "tokenizer/jinja_value.h"

namespace ds::jinja {

bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);

// Raise EvalError with Python's exception type and message on bad input.
Value apply_filter(std::string_view name, const Value& input, const CallArgs& args);
bool apply_test(std::string_view name, const Value& input, const CallArgs& args);

}  // namespace ds::jinja
