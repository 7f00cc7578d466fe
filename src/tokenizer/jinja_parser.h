#pragma once
// Parses tokens into a Template following jinja2's grammar and operator precedence (parser.py).
#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace ds::jinja {

// Throws ds::Error naming the line, column and construct for syntax errors, unknown tags, filters and tests.
Template parse(std::string_view source);

}  // namespace ds::jinja
