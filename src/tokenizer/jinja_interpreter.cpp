#include "tokenizer/jinja_interpreter.h"

#include "tokenizer/jinja_methods.h"

namespace ds::jinja {

TemplateError::TemplateError(Loc at, std::string reason)
    : ds::Error(fmt::format("chat template error at line {}, column {}: {}", at.line, at.column, reason)),
      at_(at),
      reason_(std::move(reason)) {}

const Value* Scope::find(const std::string& name) const {
  for (const Scope* s = this; s; s = s->parent.get()) {
    auto it = s->vars.find(name);
    if (it != s->vars.end()) return &it->second;
  }
  return nullptr;
}

namespace {

constexpr int kMaxMacroDepth = 200;

// jinja2's LoopContext for one for-loop; `index` moves as the loop runs.
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  explicit LoopObject(std::vector<Value> items) : items_(std::move(items)) {}
  size_t index = 0;

  std::string type_name() const override { return "LoopContext"; }
  std::string repr() const override { return fmt::format("<LoopContext {}/{}>", index + 1, items_.size()); }

  Value attribute(const std::string& name) const override {
    auto n = static_cast<int64_t>(items_.size());
    auto i = static_cast<int64_t>(index);
    if (name == "index") return Value::integer(i + 1);
    if (name == "index0") return Value::integer(i);
    if (name == "revindex") return Value::integer(n - i);
    if (name == "revindex0") return Value::integer(n - i - 1);
    if (name == "first") return Value::boolean(i == 0);
    if (name == "last") return Value::boolean(i == n - 1);
    if (name == "length") return Value::integer(n);
    if (name == "depth") return Value::integer(1);
    if (name == "depth0") return Value::integer(0);
    if (name == "previtem") return i > 0 ? items_[index - 1] : Value::undefined("there is no previous item");
    if (name == "nextitem") return i + 1 < n ? items_[index + 1] : Value::undefined("there is no next item");
    if (name == "cycle") {
      auto self = shared_from_this();
      return Value::function("cycle", [self](const CallArgs& args) {
        if (args.positional.empty()) raise("TypeError: no items for cycling given");
        return args.positional[self->index % args.positional.size()];
      });
    }
    if (name == "changed") {
      auto self = std::const_pointer_cast<LoopObject>(shared_from_this());
      return Value::function("changed", [self](const CallArgs& args) {
        Value now = Value::list(args.positional);
        if (self->last_changed_ && equals(*self->last_changed_, now)) return Value::boolean(false);
        self->last_changed_ = now;
        return Value::boolean(true);
      });
    }
    return Value::undefined(fmt::format("'LoopContext object' has no attribute '{}'", name));
  }

 private:
  std::vector<Value> items_;
  std::optional<Value> last_changed_;
};

}  // namespace

std::string Interpreter::render(const Template& tmpl, const DictData& context) {
  auto globals = std::make_shared<Scope>(nullptr);
  for (auto& [name, value] : make_globals().items) globals->vars[name] = value;
  auto root = std::make_shared<Scope>(globals);
  for (const auto& [name, value] : context.items) root->vars[name] = value;
  Interpreter interpreter;
  std::string out;
  interpreter.exec_body(tmpl.body, root, out);
  return out;
}

Interpreter::Flow Interpreter::exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
  for (const NodePtr& node : body) {
    Flow flow = exec(*node, scope, out);
    if (flow != Flow::Normal) return flow;
  }
  return Flow::Normal;
}

std::string Interpreter::render_block(const Body& body, const ScopePtr& parent) {
  std::string out;
  exec_body(body, std::make_shared<Scope>(parent), out);
  return out;
}

Interpreter::Flow Interpreter::exec(const Node& node, const ScopePtr& scope, std::string& out) {
  try {
    switch (node.kind) {
      case NodeKind::Text:
        out += static_cast<const TextNode&>(node).text;
        return Flow::Normal;
      case NodeKind::Output:
        out += to_str(eval(*static_cast<const OutputNode&>(node).expr, scope));
        return Flow::Normal;
      case NodeKind::If: {
        const auto& n = static_cast<const IfNode&>(node);
        for (const auto& [test, body] : n.branches)
          if (truthy(eval(*test, scope))) return exec_body(body, scope, out);
        return exec_body(n.otherwise, scope, out);
      }
      case NodeKind::For:
        exec_for(static_cast<const ForNode&>(node), scope, out);
        return Flow::Normal;
      case NodeKind::Set: {
        const auto& n = static_cast<const SetNode&>(node);
        assign(*n.target, eval(*n.value, scope), scope);
        return Flow::Normal;
      }
      case NodeKind::SetBlock: {
        const auto& n = static_cast<const SetBlockNode&>(node);
        Value body = Value::string(render_block(n.body, scope));
        assign(*n.target, n.filter ? apply_filter_chain(*n.filter, body, scope) : body, scope);
        return Flow::Normal;
      }
      case NodeKind::Macro: {
        const auto& n = static_cast<const MacroNode&>(node);
        scope->vars[n.name] = make_macro(n, scope);
        return Flow::Normal;
      }
      case NodeKind::CallBlock: {
        const auto& n = static_cast<const MacroNode&>(node);
        Value caller = make_macro(n, scope);
        out += to_str(eval_call(static_cast<const CallExpr&>(*n.call), scope, &caller));
        return Flow::Normal;
      }
      case NodeKind::FilterBlock: {
        const auto& n = static_cast<const FilterBlockNode&>(node);
        out += to_str(apply_filter_chain(*n.filter, Value::string(render_block(n.body, scope)), scope));
        return Flow::Normal;
      }
      case NodeKind::With: {
        const auto& n = static_cast<const WithNode&>(node);
        auto inner = std::make_shared<Scope>(scope);
        for (const auto& [target, value] : n.assignments) assign(*target, eval(*value, scope), inner);
        return exec_body(n.body, inner, out);
      }
      case NodeKind::Scope:
        return exec_body(static_cast<const ScopeNode&>(node).body, scope, out);
      case NodeKind::Break:
        return Flow::Break;
      case NodeKind::Continue:
        return Flow::Continue;
    }
  } catch (const EvalError& e) {
    throw TemplateError(node.loc, e.what());
  }
  return Flow::Normal;
}

void Interpreter::exec_for(const ForNode& node, const ScopePtr& scope, std::string& out) {
  Value iterable = eval(*node.iterable, scope);
  std::vector<Value> items = iterate(iterable);
  if (node.filter) {
    // `for x in xs if test` filters before the loop runs, so loop.length and loop.last count kept items only.
    std::vector<Value> kept;
    for (Value& item : items) {
      auto probe = std::make_shared<Scope>(scope);
      assign(*node.target, item, probe);
      if (truthy(eval(*node.filter, probe))) kept.push_back(std::move(item));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    exec_body(node.otherwise, std::make_shared<Scope>(scope), out);
    return;
  }
  auto loop = std::make_shared<LoopObject>(items);
  Value loop_value = Value::object(loop);
  for (size_t i = 0; i < items.size(); ++i) {
    loop->index = i;
    auto iteration = std::make_shared<Scope>(scope);
    iteration->vars["loop"] = loop_value;
    assign(*node.target, items[i], iteration);
    if (exec_body(node.body, iteration, out) == Flow::Break) break;
  }
}

void Interpreter::assign(const Expr& target, const Value& value, const ScopePtr& scope) {
  switch (target.kind) {
    case ExprKind::Name:
      scope->vars[static_cast<const NameExpr&>(target).name] = value;
      return;
    case ExprKind::Tuple: {
      const auto& names = static_cast<const SequenceExpr&>(target).items;
      std::vector<Value> parts = iterate(value);
      if (parts.size() != names.size())
        raise("ValueError: {} values to unpack (expected {}, got {})",
              parts.size() > names.size() ? "too many" : "not enough", names.size(), parts.size());
      for (size_t i = 0; i < names.size(); ++i) assign(*names[i], parts[i], scope);
      return;
    }
    case ExprKind::NamespaceRef: {
      const auto& ref = static_cast<const NamespaceRefExpr&>(target);
      const Value* ns = scope->find(ref.name);
      if (!ns || !ns->is_object() || !ns->as_object().set_attribute(ref.attr, value))
        raise("TemplateRuntimeError: cannot assign attribute on non-namespace object");
      return;
    }
    default:
      raise("TemplateSyntaxError: cannot assign to this expression");
  }
}

Value Interpreter::make_macro(const MacroNode& node, const ScopePtr& scope) {
  // Macros see the scope they were defined in (read at call time), like jinja2's closures. The closure holds
  // it weakly, since that scope holds the macro; the interpreter keeps it alive until the render ends.
  macro_scopes_.push_back(scope);
  std::weak_ptr<Scope> defining = scope;
  return Value::function(
      node.name.empty() ? "caller" : node.name, [this, &node, defining](const CallArgs& args) {
        ScopePtr live = defining.lock();
        if (!live)
          raise("TemplateRuntimeError: macro '{}' called after its template finished rendering", node.name);
        return call_macro(node, live, args);
      });
}

Value Interpreter::call_macro(const MacroNode& node, const ScopePtr& defining, const CallArgs& args) {
  if (macro_depth_ >= kMaxMacroDepth)
    raise("RecursionError: macro calls nested deeper than {}", kMaxMacroDepth);
  auto scope = std::make_shared<Scope>(defining);
  size_t n = node.params.size();
  std::vector<bool> bound(n, false);
  std::vector<Value> varargs;
  DictData kwargs;
  for (size_t i = 0; i < args.positional.size(); ++i) {
    if (i < n) {
      scope->vars[node.params[i]] = args.positional[i];
      bound[i] = true;
    } else {
      varargs.push_back(args.positional[i]);
    }
  }
  for (const auto& [key, value] : args.keywords) {
    auto it = std::find(node.params.begin(), node.params.end(), key);
    if (it != node.params.end()) {
      size_t i = static_cast<size_t>(it - node.params.begin());
      if (bound[i]) raise("TypeError: macro '{}' got multiple values for argument '{}'", node.name, key);
      scope->vars[key] = value;
      bound[i] = true;
    } else if (key == "caller") {
      scope->vars["caller"] = value;
    } else {
      kwargs.set(key, value);
    }
  }
  size_t first_default = n - node.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (bound[i]) continue;
    scope->vars[node.params[i]] =
        i >= first_default ? eval(*node.defaults[i - first_default], scope)
                           : Value::undefined(fmt::format("parameter '{}' was not provided", node.params[i]));
  }
  scope->vars["varargs"] = Value::list(std::move(varargs), true);
  scope->vars["kwargs"] = Value::dict(std::move(kwargs));
  ++macro_depth_;
  std::string out;
  try {
    exec_body(node.body, scope, out);
  } catch (...) {
    --macro_depth_;
    throw;
  }
  --macro_depth_;
  return Value::string(out);
}

}  // namespace ds::jinja
