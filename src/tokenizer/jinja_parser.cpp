#include "tokenizer/jinja_parser.h"

#include <initializer_list>

#include "core/error.h"
#include "tokenizer/jinja_filters.h"

namespace ds::jinja {

namespace {

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

  Template parse_template() {
    Template t;
    t.body = subparse({});
    return t;
  }

 private:
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

  // Statements until a `{% name %}` from `ends`; leaves the stream at that name.
  Body subparse(std::initializer_list<std::string_view> ends) {
    Body body;
    while (true) {
      const Token& t = current();
      if (t.type == TokenType::Eof) {
        if (ends.size() != 0)
          error(t.loc, fmt::format("unexpected end of template, expected '{}'", *ends.begin()));
        return body;
      }
      if (t.type == TokenType::Data) {
        body.push_back(std::make_unique<TextNode>(t.loc, t.text));
        advance();
      } else if (t.type == TokenType::VariableBegin) {
        advance();
        ExprPtr e = parse_tuple(true, {}, false);
        body.push_back(std::make_unique<OutputNode>(t.loc, std::move(e)));
        expect_type(TokenType::VariableEnd, "end of print statement '}}'");
      } else if (t.type == TokenType::BlockBegin) {
        advance();
        for (std::string_view end : ends)
          if (at_name(end)) return body;
        body.push_back(parse_statement());
        expect_type(TokenType::BlockEnd, "end of statement block '%}'");
      } else {
        error(t.loc, fmt::format("unexpected {}", describe(t)));
      }
    }
  }

  // After the statement's header: `%}`, the body, and the closing name (consumed).
  Body parse_body(std::initializer_list<std::string_view> ends) {
    expect_type(TokenType::BlockEnd, "end of statement block '%}'");
    return subparse(ends);
  }

  NodePtr parse_statement() {
    const Token& t = current();
    if (t.type != TokenType::Name) error(t.loc, "tag name expected");
    std::string tag = t.text;
    Loc at = t.loc;
    if (tag == "if") return parse_if();
    if (tag == "for") return parse_for();
    if (tag == "set") return parse_set();
    if (tag == "macro" || tag == "call") return parse_macro(tag == "call");
    if (tag == "filter") {
      advance();
      auto node = std::make_unique<FilterBlockNode>(at);
      node->filter = parse_filters(nullptr, true);
      node->body = parse_body({"endfilter"});
      advance();
      return node;
    }
    if (tag == "with") return parse_with();
    if (tag == "generation") {
      advance();
      auto node = std::make_unique<ScopeNode>(at);
      node->body = parse_body({"endgeneration"});
      advance();
      return node;
    }
    if (tag == "break" || tag == "continue") {
      advance();
      if (loop_depth_ == 0) error(at, fmt::format("'{}' outside of a loop", tag));
      return std::make_unique<Node>(tag == "break" ? NodeKind::Break : NodeKind::Continue, at);
    }
    if (tag == "print") {
      advance();
      return std::make_unique<OutputNode>(at, parse_tuple(true, {}, false));
    }
    static const char* unsupported[] = {"block", "extends", "include", "import", "from", "autoescape"};
    for (const char* name : unsupported)
      if (tag == name) error(at, fmt::format("'{{% {} %}}' is not supported in chat templates", tag));
    error(at, fmt::format("unknown tag '{}'", tag));
  }

  NodePtr parse_if() {
    auto node = std::make_unique<IfNode>(current().loc);
    advance();
    while (true) {
      ExprPtr test = parse_tuple(false, {}, false);
      Body body = parse_body({"elif", "else", "endif"});
      node->branches.emplace_back(std::move(test), std::move(body));
      std::string which = advance().text;
      if (which == "elif") continue;
      if (which == "else") {
        node->otherwise = parse_body({"endif"});
        advance();
      }
      return node;
    }
  }

  NodePtr parse_for() {
    auto node = std::make_unique<ForNode>(current().loc);
    advance();
    node->target = parse_assign_target({"in"}, false);
    if (!skip_name("in"))
      error(current().loc, fmt::format("expected 'in' in for loop, got {}", describe(current())));
    node->iterable = parse_tuple(false, {"recursive"}, false);
    if (skip_name("if")) node->filter = parse_expression(true);
    if (at_name("recursive")) error(current().loc, "recursive for loops are not supported in chat templates");
    ++loop_depth_;
    node->body = parse_body({"endfor", "else"});
    --loop_depth_;
    if (advance().text == "else") {
      node->otherwise = parse_body({"endfor"});
      advance();
    }
    return node;
  }

  NodePtr parse_set() {
    Loc at = current().loc;
    advance();
    ExprPtr target = parse_assign_target({}, true);
    if (skip_op("=")) return std::make_unique<SetNode>(at, std::move(target), parse_tuple(true, {}, false));
    auto node = std::make_unique<SetBlockNode>(at);
    node->target = std::move(target);
    if (at_op("|")) node->filter = parse_filters(nullptr, false);
    node->body = parse_body({"endset"});
    advance();
    return node;
  }

  NodePtr parse_macro(bool call_block) {
    auto node =
        std::make_unique<MacroNode>(call_block ? NodeKind::CallBlock : NodeKind::Macro, current().loc);
    advance();
    if (!call_block) {
      node->name = expect_name();
      parse_signature(*node);
    } else {
      if (at_op("(")) parse_signature(*node);
      node->call = parse_expression(true);
      if (node->call->kind != ExprKind::Call) error(node->loc, "expected a call in '{% call %}'");
    }
    int saved = loop_depth_;
    loop_depth_ = 0;  // break/continue cannot cross a macro body
    node->body = parse_body({call_block ? "endcall" : "endmacro"});
    loop_depth_ = saved;
    advance();
    return node;
  }

  void parse_signature(MacroNode& node) {
    expect_op("(");
    while (!at_op(")")) {
      if (!node.params.empty()) expect_op(",");
      node.params.push_back(expect_name());
      if (skip_op("=")) {
        node.defaults.push_back(parse_expression(true));
      } else if (!node.defaults.empty()) {
        error(current().loc, "non-default argument follows default argument");
      }
    }
    expect_op(")");
  }

  NodePtr parse_with() {
    auto node = std::make_unique<WithNode>(current().loc);
    advance();
    while (current().type != TokenType::BlockEnd) {
      if (!node->assignments.empty()) expect_op(",");
      ExprPtr target = parse_assign_target({}, false);
      expect_op("=");
      node->assignments.emplace_back(std::move(target), parse_expression(true));
    }
    node->body = parse_body({"endwith"});
    advance();
    return node;
  }

  ExprPtr parse_assign_target(std::initializer_list<std::string_view> extra_ends, bool with_namespace) {
    Loc at = current().loc;
    std::vector<ExprPtr> names;
    bool tuple = false;
    while (true) {
      if (!names.empty()) expect_op(",");
      if (is_tuple_end(extra_ends)) break;
      std::string name = expect_name();
      if (with_namespace && skip_op(".")) {
        names.push_back(std::make_unique<NamespaceRefExpr>(at, name, expect_name()));
      } else {
        names.push_back(std::make_unique<NameExpr>(at, name));
      }
      if (!at_op(",")) break;
      tuple = true;
    }
    if (names.empty()) error(at, "expected an assignment target");
    if (!tuple) return std::move(names[0]);
    auto seq = std::make_unique<SequenceExpr>(ExprKind::Tuple, at);
    for (auto& n : names) {
      if (n->kind != ExprKind::Name) error(at, "can only unpack into plain names");
      seq->items.push_back(std::move(n));
    }
    return seq;
  }

  bool is_tuple_end(std::initializer_list<std::string_view> extra_ends) const {
    const Token& t = current();
    if (t.type == TokenType::VariableEnd || t.type == TokenType::BlockEnd || is_op(t, ")")) return true;
    for (std::string_view end : extra_ends)
      if (is_name(t, end)) return true;
    return false;
  }

  // Comma-separated expressions form a tuple (jinja2's parse_tuple).
  ExprPtr parse_tuple(bool with_conditional, std::initializer_list<std::string_view> extra_ends,
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

  ExprPtr parse_expression(bool with_conditional) {
    return with_conditional ? parse_conditional() : parse_or();
  }

  ExprPtr parse_conditional() {
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

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      Loc at = advance().loc;
      left = std::make_unique<BinaryExpr>(ExprKind::Or, at, "or", std::move(left), parse_and());
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      Loc at = advance().loc;
      left = std::make_unique<BinaryExpr>(ExprKind::And, at, "and", std::move(left), parse_not());
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      Loc at = advance().loc;
      return std::make_unique<UnaryExpr>(ExprKind::Not, at, parse_not());
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
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

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_op("+") || at_op("-")) {
      const Token& t = advance();
      left = std::make_unique<BinaryExpr>(ExprKind::Binary, t.loc, t.text, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    Loc at = current().loc;
    ExprPtr first = parse_math2();
    if (!at_op("~")) return first;
    auto concat = std::make_unique<ConcatExpr>(at);
    concat->items.push_back(std::move(first));
    while (skip_op("~")) concat->items.push_back(parse_math2());
    return concat;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const Token& t = advance();
      left = std::make_unique<BinaryExpr>(ExprKind::Binary, t.loc, t.text, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_op("**")) {
      const Token& t = advance();
      left = std::make_unique<BinaryExpr>(ExprKind::Binary, t.loc, "**", std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
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

  ExprPtr parse_primary() {
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

  ExprPtr parse_postfix(ExprPtr node) {
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

  ExprPtr parse_filter_expr(ExprPtr node) {
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

  ExprPtr parse_subscript(ExprPtr node) {
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

  ExprPtr parse_subscribed() {
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

  Arguments parse_call_args() {
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

  ExprPtr parse_call(ExprPtr callee) {
    auto call = std::make_unique<CallExpr>(current().loc, std::move(callee));
    call->args = parse_call_args();
    return call;
  }

  // One or more `| name(args)`; `start_inline` parses `{% filter name %}` where the first pipe is absent.
  ExprPtr parse_filters(ExprPtr node, bool start_inline) {
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

  ExprPtr parse_test(ExprPtr node) {
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

  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

Template parse(std::string_view source) {
  return Parser(tokenize(source)).parse_template();
}

}  // namespace ds::jinja
