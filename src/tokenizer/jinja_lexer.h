#pragma once
// Splits a template into text and tag tokens with jinja2's whitespace rules as transformers configures them:
// trim_blocks, lstrip_blocks, `{%-`/`-%}` and `{%+`/`+%}` markers, comments, raw blocks, no trailing newline.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ds::jinja {

struct Loc {
  int line = 0;
  int column = 0;
};

enum class TokenType {
  Data,
  VariableBegin,
  VariableEnd,
  BlockBegin,
  BlockEnd,
  Name,
  String,
  Integer,
  Float,
  Operator,
  Eof
};

struct Token {
  TokenType type;
  std::string text;  // data, name, unescaped string, or operator spelling
  int64_t integer = 0;
  double number = 0.0;
  Loc loc;
};

// Throws ds::Error naming the line and column of bad input (unclosed tags, strings, brackets).
std::vector<Token> tokenize(std::string_view source);

std::string describe(const Token& token);

}  // namespace ds::jinja
