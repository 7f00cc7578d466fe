#pragma once
// The parsed template: expression and statement nodes mirroring jinja2's (nodes.py), each with its position.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_value.h"

namespace ds::jinja {

enum class ExprKind {
  Literal,
  Name,
  List,
  Tuple,
  Dict,
  Getattr,
  Getitem,
  Slice,
  Call,
  Filter,
  Test,
  Not,
  Neg,
  Pos,
  Binary,
  And,
  Or,
  Concat,
  Compare,
  Conditional,
  NamespaceRef
};

struct Expr {
  Expr(ExprKind k, Loc l) : kind(k), loc(l) {}
  virtual ~Expr() = default;
  ExprKind kind;
  Loc loc;
};
using ExprPtr = std::unique_ptr<Expr>;

struct LiteralExpr : Expr {
  LiteralExpr(Loc l, Value v) : Expr(ExprKind::Literal, l), value(std::move(v)) {}
  Value value;
};

struct NameExpr : Expr {
  NameExpr(Loc l, std::string n) : Expr(ExprKind::Name, l), name(std::move(n)) {}
  std::string name;
};

// List or tuple literal, also tuple assignment targets.
struct SequenceExpr : Expr {
  SequenceExpr(ExprKind k, Loc l) : Expr(k, l) {}
  std::vector<ExprPtr> items;
};

struct DictExpr : Expr {
  explicit DictExpr(Loc l) : Expr(ExprKind::Dict, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> pairs;
};

struct GetattrExpr : Expr {
  GetattrExpr(Loc l, ExprPtr o, std::string a)
      : Expr(ExprKind::Getattr, l), object(std::move(o)), attr(std::move(a)) {}
  ExprPtr object;
  std::string attr;
};

struct GetitemExpr : Expr {
  GetitemExpr(Loc l, ExprPtr o, ExprPtr k)
      : Expr(ExprKind::Getitem, l), object(std::move(o)), key(std::move(k)) {}
  ExprPtr object;
  ExprPtr key;
};

struct SliceExpr : Expr {
  explicit SliceExpr(Loc l) : Expr(ExprKind::Slice, l) {}
  ExprPtr start, stop, step;  // any may be null
};

struct Arguments {
  std::vector<ExprPtr> positional;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  ExprPtr star_args;    // *args
  ExprPtr star_kwargs;  // **kwargs
};

struct CallExpr : Expr {
  CallExpr(Loc l, ExprPtr c) : Expr(ExprKind::Call, l), callee(std::move(c)) {}
  ExprPtr callee;
  Arguments args;
};

// `input | name(args)` and `input is name(args)`; a filter's input is null in `{% filter %}` and `{% set x |
// f %}`.
struct FilterExpr : Expr {
  FilterExpr(ExprKind k, Loc l, ExprPtr i, std::string n)
      : Expr(k, l), input(std::move(i)), name(std::move(n)) {}
  ExprPtr input;
  std::string name;
  Arguments args;
};

struct UnaryExpr : Expr {
  UnaryExpr(ExprKind k, Loc l, ExprPtr o) : Expr(k, l), operand(std::move(o)) {}
  ExprPtr operand;
};

// Arithmetic (op is "+", "-", "*", "/", "//", "%", "**"), and/or (op empty, kind says which).
struct BinaryExpr : Expr {
  BinaryExpr(ExprKind k, Loc l, std::string o, ExprPtr a, ExprPtr b)
      : Expr(k, l), op(std::move(o)), left(std::move(a)), right(std::move(b)) {}
  std::string op;
  ExprPtr left, right;
};

struct ConcatExpr : Expr {
  explicit ConcatExpr(Loc l) : Expr(ExprKind::Concat, l) {}
  std::vector<ExprPtr> items;
};

// `a < b == c in d`: ops are "==", "!=", "<", "<=", ">", ">=", "in", "not in".
struct CompareExpr : Expr {
  CompareExpr(Loc l, ExprPtr f) : Expr(ExprKind::Compare, l), first(std::move(f)) {}
  ExprPtr first;
  std::vector<std::pair<std::string, ExprPtr>> ops;
};

struct ConditionalExpr : Expr {
  ConditionalExpr(Loc l, ExprPtr t, ExprPtr y, ExprPtr n)
      : Expr(ExprKind::Conditional, l), test(std::move(t)), then(std::move(y)), otherwise(std::move(n)) {}
  ExprPtr test, then, otherwise;  // otherwise may be null
};

// `ns.attr` as an assignment target.
struct NamespaceRefExpr : Expr {
  NamespaceRefExpr(Loc l, std::string n, std::string a)
      : Expr(ExprKind::NamespaceRef, l), name(std::move(n)), attr(std::move(a)) {}
  std::string name, attr;
};

enum class NodeKind {
  Text,
  Output,
  If,
  For,
  Set,
  SetBlock,
  Macro,
  CallBlock,
  FilterBlock,
  With,
  Break,
  Continue,
  Scope
};

struct Node {
  Node(NodeKind k, Loc l) : kind(k), loc(l) {}
  virtual ~Node() = default;
  NodeKind kind;
  Loc loc;
};
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct TextNode : Node {
  TextNode(Loc l, std::string t) : Node(NodeKind::Text, l), text(std::move(t)) {}
  std::string text;
};

struct OutputNode : Node {
  OutputNode(Loc l, ExprPtr e) : Node(NodeKind::Output, l), expr(std::move(e)) {}
  ExprPtr expr;
};

struct IfNode : Node {
  explicit IfNode(Loc l) : Node(NodeKind::If, l) {}
  std::vector<std::pair<ExprPtr, Body>> branches;  // if, then each elif
  Body otherwise;
};

struct ForNode : Node {
  explicit ForNode(Loc l) : Node(NodeKind::For, l) {}
  ExprPtr target, iterable, filter;  // filter may be null
  Body body, otherwise;
};

struct SetNode : Node {
  SetNode(Loc l, ExprPtr t, ExprPtr v) : Node(NodeKind::Set, l), target(std::move(t)), value(std::move(v)) {}
  ExprPtr target, value;
};

struct SetBlockNode : Node {
  explicit SetBlockNode(Loc l) : Node(NodeKind::SetBlock, l) {}
  ExprPtr target, filter;  // filter may be null
  Body body;
};

// Macros and `{% call %}` blocks share a signature.
struct MacroNode : Node {
  MacroNode(NodeKind k, Loc l) : Node(k, l) {}
  std::string name;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;  // for the last params
  ExprPtr call;                   // CallBlock only: the macro call that receives `caller`
  Body body;
};

struct FilterBlockNode : Node {
  explicit FilterBlockNode(Loc l) : Node(NodeKind::FilterBlock, l) {}
  ExprPtr filter;
  Body body;
};

struct WithNode : Node {
  explicit WithNode(Loc l) : Node(NodeKind::With, l) {}
  std::vector<std::pair<ExprPtr, ExprPtr>> assignments;
  Body body;
};

// A body rendered in place: transformers' `{% generation %}` (assistant-mask tracking, output unchanged).
struct ScopeNode : Node {
  explicit ScopeNode(Loc l) : Node(NodeKind::Scope, l) {}
  Body body;
};

struct Template {
  Body body;
};

}  // namespace ds::jinja
