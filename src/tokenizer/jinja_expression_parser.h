#pragma once
// Expressions of the template language with jinja2's grammar and precedence (parser.py, parse_tuple down to
// parse_primary), over the token stream; StatementParser (jinja_parser.cpp) builds statements on top.
#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"

namespace ds::jinja {

class ExpressionParser {
 public:
  explicit ExpressionParser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

 protected:
  const Token& current() const { return tokens_[pos_]; }
  const Token& look() const { return tokens_[std::min(pos_ + 1, tokens_.size() - 1)]; }
  const Token& advance() { return tokens_[pos_ < tokens_.size() - 1 ? pos_++ : pos_]; }

  bool is_op(const Token& t, std::string_view op) const {
    return t.type == TokenType::Operator && t.text == op;
  }
  bool is_name(const Token& t, std::string_view name) const {
    return t.type == TokenType::Name && t.text == name;
  }
  bool at_op(std::string_view op) const { return is_op(current(), op); }
  bool at_name(std::string_view name) const { return is_name(current(), name); }
  bool skip_op(std::string_view op) {
    if (!at_op(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void error(const Loc& at, const std::string& what) const {
    ds::fail("chat template syntax error at line {}, column {}: {}", at.line, at.column, what);
  }

  const Token& expect_op(std::string_view op) {
    if (!at_op(op)) error(current().loc, fmt::format("expected '{}', got {}", op, describe(current())));
    return advance();
  }
  const Token& expect_type(TokenType type, std::string_view what) {
    if (current().type != type)
      error(current().loc, fmt::format("expected {}, got {}", what, describe(current())));
    return advance();
  }
  std::string expect_name() { return expect_type(TokenType::Name, "a name").text; }

  bool is_tuple_end(std::initializer_list<std::string_view> extra_ends) const;
  // Comma-separated expressions form a tuple (jinja2's parse_tuple).
  ExprPtr parse_tuple(bool with_conditional, std::initializer_list<std::string_view> extra_ends,
                      bool explicit_parentheses);
  ExprPtr parse_expression(bool with_conditional);
  ExprPtr parse_primary();
  ExprPtr parse_postfix(ExprPtr node);
  Arguments parse_call_args();
  // One or more `| name(args)`; `start_inline` parses `{% filter name %}` where the first pipe is absent.
  ExprPtr parse_filters(ExprPtr node, bool start_inline);

  std::vector<Token> tokens_;
  size_t pos_ = 0;

 private:
  ExprPtr parse_conditional();
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr node);
  ExprPtr parse_subscribed();
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_test(ExprPtr node);
};

}  // namespace ds::jinja
