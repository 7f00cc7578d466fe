#pragma once
// Runs a parsed template: jinja2's scoping (a for-loop iteration, macro call or set block gets its own scope;
// if does not), loop variables, macros and calls, with errors that name the template line and column.
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "tokenizer/jinja_ast.h"

namespace ds::jinja {

// A template failed while rendering: a raise_exception() call (reason is its message) or a Python-style
// error.
class TemplateError : public ds::Error {
 public:
  TemplateError(Loc at, std::string reason);
  int line() const { return at_.line; }
  int column() const { return at_.column; }
  const std::string& reason() const { return reason_; }

 private:
  Loc at_;
  std::string reason_;
};

struct Scope {
  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}
  const Value* find(const std::string& name) const;
  std::shared_ptr<Scope> parent;
  std::unordered_map<std::string, Value> vars;
};
using ScopePtr = std::shared_ptr<Scope>;

class Interpreter {
 public:
  // Renders `tmpl` with the context's variables over transformers' globals.
  static std::string render(const Template& tmpl, const DictData& context);

 private:
  enum class Flow { Normal, Break, Continue };

  // Statements (jinja_interpreter.cpp).
  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out);
  Flow exec(const Node& node, const ScopePtr& scope, std::string& out);
  void exec_for(const ForNode& node, const ScopePtr& scope, std::string& out);
  std::string render_block(const Body& body, const ScopePtr& parent);
  void assign(const Expr& target, const Value& value, const ScopePtr& scope);
  Value make_macro(const MacroNode& node, const ScopePtr& scope);
  Value call_macro(const MacroNode& node, const ScopePtr& defining, const CallArgs& args);

  // Expressions (jinja_eval.cpp).
  Value eval(const Expr& expr, const ScopePtr& scope);
  Value eval_unlocated(const Expr& expr, const ScopePtr& scope);
  CallArgs eval_args(const Arguments& args, const ScopePtr& scope);
  Value eval_call(const CallExpr& call, const ScopePtr& scope, const Value* caller);
  Value eval_compare(const CompareExpr& expr, const ScopePtr& scope);
  // A filter chain whose innermost input is `input` (for `{% filter %}` and `{% set x | f %}`).
  Value apply_filter_chain(const Expr& chain, const Value& input, const ScopePtr& scope);

  int macro_depth_ = 0;
  std::vector<ScopePtr> macro_scopes_;  // scopes that define macros, alive until the render ends
};

// Python's binary operators on template values ("+", "-", "*", "/", "//", "%", "**").
Value arithmetic(const std::string& op, const Value& a, const Value& b);

}  // namespace ds::jinja
