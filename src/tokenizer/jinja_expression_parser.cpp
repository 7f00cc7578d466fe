#include "tokenizer/jinja_expression_parser.h"

#include "tokenizer/jinja_filters.h"

namespace ds::jinja {

bool ExpressionParser::is_tuple_end(std::initializer_list<std::string_view> extra_ends) const {
  const Token& t = current();
  if (t.type == TokenType::VariableEnd || t.type == TokenType::BlockEnd || is_op(t, ")")) return true;
  for (std::string_view end : extra_ends)
    if (is_name(t, end)) return true;
  return false;
}

ExprPtr ExpressionParser::parse_tuple(bool with_conditional,
                                      std::initializer_list<std::string_view> extra_ends,
                                      bool explicit_parentheses) {
  Loc at = current().loc;
  std::vector<ExprPtr> items;
  bool tuple = false;
  while (true) {
    if (!items.empty()) expect_op(",");
    if (is_tuple_end(extra_ends)) break;
    items.push_back(parse_expression(with_conditional));
    if (!at_op(",")) break;
    tuple = true;
  }
  if (!tuple) {
    if (!items.empty()) return std::move(items[0]);
    if (!explicit_parentheses)
      error(current().loc, fmt::format("expected an expression, got {}", describe(current())));
  }
  auto seq = std::make_unique<SequenceExpr>(ExprKind::Tuple, at);
  seq->items = std::move(items);
  return seq;
}

ExprPtr ExpressionParser::parse_expression(bool with_conditional) {
  return with_conditional ? parse_conditional() : parse_or();
}

ExprPtr ExpressionParser::parse_conditional() {
  Loc at = current().loc;
  ExprPtr expr = parse_or();
  while (skip_name("if")) {
    ExprPtr test = parse_or();
    ExprPtr otherwise = skip_name("else") ? parse_conditional() : nullptr;
    expr = std::make_unique<ConditionalExpr>(at, std::move(test), std::move(expr), std::move(otherwise));
    at = current().loc;
  }
  return expr;
}

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  while (at_name("or")) {
    Loc at = advance().loc;
    left = std::make_unique<BinaryExpr>(ExprKind::Or, at, "or", std::move(left), parse_and());
  }
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  while (at_name("and")) {
    Loc at = advance().loc;
    left = std::make_unique<BinaryExpr>(ExprKind::And, at, "and", std::move(left), parse_not());
  }
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (at_name("not")) {
    Loc at = advance().loc;
    return std::make_unique<UnaryExpr>(ExprKind::Not, at, parse_not());
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
  Loc at = current().loc;
  ExprPtr expr = parse_math1();
  std::unique_ptr<CompareExpr> cmp;
  while (true) {
    std::string op;
    const Token& t = current();
    if (t.type == TokenType::Operator && (t.text == "==" || t.text == "!=" || t.text == "<" ||
                                          t.text == "<=" || t.text == ">" || t.text == ">=")) {
      op = t.text;
      advance();
    } else if (is_name(t, "in")) {
      op = "in";
      advance();
    } else if (is_name(t, "not") && is_name(look(), "in")) {
      op = "not in";
      advance();
      advance();
    } else {
      break;
    }
    if (!cmp) cmp = std::make_unique<CompareExpr>(at, std::move(expr));
    cmp->ops.emplace_back(op, parse_math1());
  }
  if (cmp) return cmp;
  return expr;
}

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (at_op("+") || at_op("-")) {
    const Token& t = advance();
    left = std::make_unique<BinaryExpr>(ExprKind::Binary, t.loc, t.text, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  Loc at = current().loc;
  ExprPtr first = parse_math2();
  if (!at_op("~")) return first;
  auto concat = std::make_unique<ConcatExpr>(at);
  concat->items.push_back(std::move(first));
  while (skip_op("~")) concat->items.push_back(parse_math2());
  return concat;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    const Token& t = advance();
    left = std::make_unique<BinaryExpr>(ExprKind::Binary, t.loc, t.text, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (at_op("**")) {
    const Token& t = advance();
    left = std::make_unique<BinaryExpr>(ExprKind::Binary, t.loc, "**", std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  Loc at = current().loc;
  ExprPtr node;
  if (skip_op("-")) {
    node = std::make_unique<UnaryExpr>(ExprKind::Neg, at, parse_unary(false));
  } else if (skip_op("+")) {
    node = std::make_unique<UnaryExpr>(ExprKind::Pos, at, parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

ExprPtr ExpressionParser::parse_primary() {
  const Token& t = current();
  Loc at = t.loc;
  switch (t.type) {
    case TokenType::Name: {
      advance();
      if (t.text == "true" || t.text == "True")
        return std::make_unique<LiteralExpr>(at, Value::boolean(true));
      if (t.text == "false" || t.text == "False")
        return std::make_unique<LiteralExpr>(at, Value::boolean(false));
      if (t.text == "none" || t.text == "None") return std::make_unique<LiteralExpr>(at, Value::none());
      return std::make_unique<NameExpr>(at, t.text);
    }
    case TokenType::String: {
      std::string s;
      while (current().type == TokenType::String) s += advance().text;  // adjacent literals join
      return std::make_unique<LiteralExpr>(at, Value::string(std::move(s)));
    }
    case TokenType::Integer:
      advance();
      return std::make_unique<LiteralExpr>(at, Value::integer(t.integer));
    case TokenType::Float:
      advance();
      return std::make_unique<LiteralExpr>(at, Value::number(t.number));
    default:
      break;
  }
  if (skip_op("(")) {
    ExprPtr e = parse_tuple(true, {}, true);
    expect_op(")");
    return e;
  }
  if (skip_op("[")) {
    auto list = std::make_unique<SequenceExpr>(ExprKind::List, at);
    while (!at_op("]")) {
      if (!list->items.empty()) expect_op(",");
      if (at_op("]")) break;
      list->items.push_back(parse_expression(true));
    }
    expect_op("]");
    return list;
  }
  if (skip_op("{")) {
    auto dict = std::make_unique<DictExpr>(at);
    while (!at_op("}")) {
      if (!dict->pairs.empty()) expect_op(",");
      if (at_op("}")) break;
      ExprPtr key = parse_expression(true);
      expect_op(":");
      dict->pairs.emplace_back(std::move(key), parse_expression(true));
    }
    expect_op("}");
    return dict;
  }
  error(at, fmt::format("unexpected {}", describe(t)));
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (at_op(".")) {
      Loc at = advance().loc;
      const Token& attr = current();
      if (attr.type == TokenType::Name) {
        advance();
        node = std::make_unique<GetattrExpr>(at, std::move(node), attr.text);
      } else if (attr.type == TokenType::Integer) {
        advance();
        node = std::make_unique<GetitemExpr>(
            at, std::move(node), std::make_unique<LiteralExpr>(attr.loc, Value::integer(attr.integer)));
      } else {
        error(attr.loc, "expected name or number after '.'");
      }
    } else if (at_op("[")) {
      node = parse_subscript(std::move(node));
    } else if (at_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (at_op("|")) {
      node = parse_filters(std::move(node), false);
    } else if (at_name("is")) {
      node = parse_test(std::move(node));
    } else if (at_op("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr node) {
  Loc at = expect_op("[").loc;
  std::vector<ExprPtr> args;
  while (!at_op("]")) {
    if (!args.empty()) expect_op(",");
    args.push_back(parse_subscribed());
  }
  expect_op("]");
  if (args.size() == 1) return std::make_unique<GetitemExpr>(at, std::move(node), std::move(args[0]));
  auto tuple = std::make_unique<SequenceExpr>(ExprKind::Tuple, at);
  tuple->items = std::move(args);
  return std::make_unique<GetitemExpr>(at, std::move(node), std::move(tuple));
}

ExprPtr ExpressionParser::parse_subscribed() {
  Loc at = current().loc;
  ExprPtr first;
  if (!at_op(":")) {
    first = parse_expression(true);
    if (!at_op(":")) return first;
  }
  advance();
  auto slice = std::make_unique<SliceExpr>(at);
  slice->start = std::move(first);
  if (!at_op(":") && !at_op("]") && !at_op(",")) slice->stop = parse_expression(true);
  if (skip_op(":"))
    if (!at_op("]") && !at_op(",")) slice->step = parse_expression(true);
  return slice;
}

Arguments ExpressionParser::parse_call_args() {
  Arguments args;
  expect_op("(");
  bool need_comma = false;
  while (!at_op(")")) {
    if (need_comma) {
      expect_op(",");
      if (at_op(")")) break;
    }
    if (skip_op("*")) {
      args.star_args = parse_expression(true);
    } else if (skip_op("**")) {
      args.star_kwargs = parse_expression(true);
    } else if (current().type == TokenType::Name && is_op(look(), "=")) {
      std::string key = advance().text;
      advance();
      args.keywords.emplace_back(key, parse_expression(true));
    } else {
      if (!args.keywords.empty() || args.star_args || args.star_kwargs)
        error(current().loc, "positional argument follows keyword argument");
      args.positional.push_back(parse_expression(true));
    }
    need_comma = true;
  }
  expect_op(")");
  return args;
}

ExprPtr ExpressionParser::parse_call(ExprPtr callee) {
  auto call = std::make_unique<CallExpr>(current().loc, std::move(callee));
  call->args = parse_call_args();
  return call;
}

ExprPtr ExpressionParser::parse_filters(ExprPtr node, bool start_inline) {
  while (at_op("|") || start_inline) {
    if (!start_inline) advance();
    start_inline = false;
    const Token& t = expect_type(TokenType::Name, "a filter name");
    if (!is_known_filter(t.text)) error(t.loc, fmt::format("no filter named '{}'", t.text));
    auto filter = std::make_unique<FilterExpr>(ExprKind::Filter, t.loc, std::move(node), t.text);
    if (at_op("(")) filter->args = parse_call_args();
    node = std::move(filter);
  }
  return node;
}

ExprPtr ExpressionParser::parse_test(ExprPtr node) {
  Loc at = advance().loc;  // 'is'
  bool negated = skip_name("not");
  const Token& t = expect_type(TokenType::Name, "a test name");
  if (!is_known_test(t.text)) error(t.loc, fmt::format("no test named '{}'", t.text));
  auto test = std::make_unique<FilterExpr>(ExprKind::Test, at, std::move(node), t.text);
  const Token& next = current();
  if (is_op(next, "(")) {
    test->args = parse_call_args();
  } else if ((next.type == TokenType::Name || next.type == TokenType::String ||
              next.type == TokenType::Integer || next.type == TokenType::Float || is_op(next, "[") ||
              is_op(next, "{")) &&
             !is_name(next, "else") && !is_name(next, "or") && !is_name(next, "and")) {
    if (is_name(next, "is")) error(next.loc, "you cannot chain multiple tests with 'is'");
    test->args.positional.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
  }
  if (negated) return std::make_unique<UnaryExpr>(ExprKind::Not, at, std::move(test));
  return test;
}

}  // namespace ds::jinja
