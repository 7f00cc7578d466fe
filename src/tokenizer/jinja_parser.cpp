#include "tokenizer/jinja_parser.h"

#include <initializer_list>

#include "core/error.h"
#include "tokenizer/jinja_expression_parser.h"

namespace ds::jinja {

namespace {

// Statements (if, for, set, macro, call, filter, with) and template text, over the expression parser.
class StatementParser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  Template parse_template() {
    Template t;
    t.body = subparse({});
    return t;
  }

 private:
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

  int loop_depth_ = 0;
};

}  // namespace

Template parse(std::string_view source) {
  return StatementParser(tokenize(source)).parse_template();
}

}  // namespace ds::jinja
