// Expression evaluation for the Interpreter: names, literals, lookups, calls, filters, tests and operators.
#include <cmath>

#include "tokenizer/jinja_filters.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_methods.h"
#include "tokenizer/jinja_text.h"

namespace ds::jinja {

namespace {

void require_defined(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
}

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  if (a.is_string() && op == "+")
    raise("TypeError: can only concatenate str (not \"{}\") to str", type_name(b));
  if (a.is_list() && op == "+")
    raise("TypeError: can only concatenate {} (not \"{}\") to {}", type_name(a), type_name(b), type_name(a));
  raise("TypeError: unsupported operand type(s) for {}: '{}' and '{}'", op, type_name(a), type_name(b));
}

template <typename Op>
int64_t checked(Op op, int64_t x, int64_t y) {
  int64_t r = 0;
  if (op(x, y, &r)) raise("OverflowError: integer result does not fit in 64 bits");
  return r;
}
bool add(int64_t x, int64_t y, int64_t* r) {
  return __builtin_add_overflow(x, y, r);
}
bool sub(int64_t x, int64_t y, int64_t* r) {
  return __builtin_sub_overflow(x, y, r);
}
bool mul(int64_t x, int64_t y, int64_t* r) {
  return __builtin_mul_overflow(x, y, r);
}

Value repeat(const Value& seq, int64_t times) {
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < times; ++i) out += seq.as_string();
    return Value::string(out);
  }
  std::vector<Value> out;
  for (int64_t i = 0; i < times; ++i)
    out.insert(out.end(), seq.as_list().items.begin(), seq.as_list().items.end());
  return Value::list(std::move(out), seq.is_tuple());
}

Value int_arithmetic(const std::string& op, int64_t x, int64_t y) {
  if (op == "+") return Value::integer(checked(add, x, y));
  if (op == "-") return Value::integer(checked(sub, x, y));
  if (op == "*") return Value::integer(checked(mul, x, y));
  if (op == "/") {
    if (y == 0) raise("ZeroDivisionError: division by zero");
    return Value::number(static_cast<double>(x) / static_cast<double>(y));
  }
  if (op == "//" || op == "%") {
    if (y == 0) raise("ZeroDivisionError: integer division or modulo by zero");
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;  // Python floors toward negative infinity
      m += y;
    }
    return Value::integer(op == "//" ? q : m);
  }
  if (y < 0) {
    if (x == 0) raise("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
  }
  int64_t result = 1;
  for (int64_t i = 0; i < y; ++i) result = checked(mul, result, x);
  return Value::integer(result);
}

Value float_arithmetic(const std::string& op, double x, double y) {
  if (op == "+") return Value::number(x + y);
  if (op == "-") return Value::number(x - y);
  if (op == "*") return Value::number(x * y);
  if (op == "**") {
    if (x == 0.0 && y < 0) raise("ZeroDivisionError: 0.0 cannot be raised to a negative power");
    return Value::number(std::pow(x, y));
  }
  if (y == 0.0)
    raise("ZeroDivisionError: float {} by zero", op == "/"    ? "division"
                                                 : op == "//" ? "floor division"
                                                              : "modulo");
  if (op == "/") return Value::number(x / y);
  // CPython's float_divmod, so // and % agree with Python to the last bit.
  double mod = std::fmod(x, y);
  double div = (x - mod) / y;
  if (mod != 0.0) {
    if ((y < 0) != (mod < 0)) {
      mod += y;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, y);
  }
  if (op == "%") return Value::number(mod);
  if (div == 0.0) return Value::number(std::copysign(0.0, x / y));
  double floordiv = std::floor(div);
  if (div - floordiv > 0.5) floordiv += 1.0;
  return Value::number(floordiv);
}

}  // namespace

Value arithmetic(const std::string& op, const Value& a, const Value& b) {
  require_defined(a);
  require_defined(b);
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return float_arithmetic(op, a.as_double(), b.as_double());
    return int_arithmetic(op, a.as_int(), b.as_int());
  }
  if (op == "+" && a.is_string() && b.is_string()) {
    // markupsafe: adding to a Markup string escapes the plain side.
    if (a.is_markup() || b.is_markup()) {
      std::string left = a.is_markup() ? a.as_string() : text::html_escape(a.as_string());
      std::string right = b.is_markup() ? b.as_string() : text::html_escape(b.as_string());
      return Value::string(left + right, true);
    }
    return Value::string(a.as_string() + b.as_string());
  }
  if (op == "+" && a.is_list() && b.is_list() && a.is_tuple() == b.is_tuple()) {
    std::vector<Value> items = a.as_list().items;
    items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
    return Value::list(std::move(items), a.is_tuple());
  }
  if (op == "*" && (a.is_string() || a.is_list()) && (b.is_int() || b.is_bool()))
    return repeat(a, b.as_int());
  if (op == "*" && (b.is_string() || b.is_list()) && (a.is_int() || a.is_bool()))
    return repeat(b, a.as_int());
  if (op == "%" && a.is_string()) return Value::string(percent_format(a.as_string(), b));
  unsupported(op, a, b);
}

Value Interpreter::eval(const Expr& expr, const ScopePtr& scope) {
  try {
    return eval_unlocated(expr, scope);
  } catch (const EvalError& e) {
    throw TemplateError(expr.loc, e.what());
  }
}

CallArgs Interpreter::eval_args(const Arguments& args, const ScopePtr& scope) {
  CallArgs out;
  for (const ExprPtr& e : args.positional) out.positional.push_back(eval(*e, scope));
  for (const auto& [name, e] : args.keywords) out.keywords.emplace_back(name, eval(*e, scope));
  if (args.star_args)
    for (Value& v : iterate(eval(*args.star_args, scope))) out.positional.push_back(std::move(v));
  if (args.star_kwargs) {
    Value kw = eval(*args.star_kwargs, scope);
    if (!kw.is_dict()) raise("TypeError: argument after ** must be a mapping, not {}", type_name(kw));
    for (const auto& [k, v] : kw.as_dict().items) out.keywords.emplace_back(k, v);
  }
  return out;
}

Value Interpreter::eval_call(const CallExpr& call, const ScopePtr& scope, const Value* caller) {
  Value callee = eval(*call.callee, scope);
  CallArgs args = eval_args(call.args, scope);
  if (caller) args.keywords.emplace_back("caller", *caller);
  require_defined(callee);
  if (!callee.is_function()) raise("TypeError: '{}' object is not callable", type_name(callee));
  return callee.as_function().call(args);
}

Value Interpreter::apply_filter_chain(const Expr& chain, const Value& input, const ScopePtr& scope) {
  const auto& filter = static_cast<const FilterExpr&>(chain);
  Value inner = filter.input ? apply_filter_chain(*filter.input, input, scope) : input;
  try {
    return apply_filter(filter.name, inner, eval_args(filter.args, scope));
  } catch (const EvalError& e) {
    throw TemplateError(chain.loc, e.what());
  }
}

Value Interpreter::eval_compare(const CompareExpr& expr, const ScopePtr& scope) {
  Value left = eval(*expr.first, scope);
  for (const auto& [op, operand] : expr.ops) {
    Value right = eval(*operand, scope);
    bool ok;
    if (op == "==")
      ok = equals(left, right);
    else if (op == "!=")
      ok = !equals(left, right);
    else if (op == "in")
      ok = contains(right, left);
    else if (op == "not in")
      ok = !contains(right, left);
    else {
      int c = compare(left, right, op);
      ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
    }
    if (!ok) return Value::boolean(false);
    left = std::move(right);  // Python chains: a < b < c is a < b and b < c
  }
  return Value::boolean(true);
}

Value Interpreter::eval_unlocated(const Expr& expr, const ScopePtr& scope) {
  switch (expr.kind) {
    case ExprKind::Literal:
      return static_cast<const LiteralExpr&>(expr).value;
    case ExprKind::Name: {
      const auto& name = static_cast<const NameExpr&>(expr).name;
      if (const Value* v = scope->find(name)) return *v;
      return Value::undefined(fmt::format("'{}' is undefined", name));
    }
    case ExprKind::List:
    case ExprKind::Tuple: {
      std::vector<Value> items;
      for (const ExprPtr& e : static_cast<const SequenceExpr&>(expr).items) items.push_back(eval(*e, scope));
      return Value::list(std::move(items), expr.kind == ExprKind::Tuple);
    }
    case ExprKind::Dict: {
      DictData dict;
      for (const auto& [k, v] : static_cast<const DictExpr&>(expr).pairs) {
        Value key = eval(*k, scope);
        if (!key.is_string())
          raise("TypeError: chat template dict keys must be strings, not {}", type_name(key));
        dict.set(key.as_string(), eval(*v, scope));
      }
      return Value::dict(std::move(dict));
    }
    case ExprKind::Getattr: {
      const auto& e = static_cast<const GetattrExpr&>(expr);
      return get_attribute(eval(*e.object, scope), e.attr);
    }
    case ExprKind::Getitem: {
      const auto& e = static_cast<const GetitemExpr&>(expr);
      Value obj = eval(*e.object, scope);
      if (e.key->kind == ExprKind::Slice) {
        const auto& s = static_cast<const SliceExpr&>(*e.key);
        auto part = [&](const ExprPtr& p) { return p ? eval(*p, scope) : Value::none(); };
        return get_slice(obj, part(s.start), part(s.stop), part(s.step));
      }
      return get_item(obj, eval(*e.key, scope));
    }
    case ExprKind::Call:
      return eval_call(static_cast<const CallExpr&>(expr), scope, nullptr);
    case ExprKind::Filter: {
      const auto& f = static_cast<const FilterExpr&>(expr);
      return apply_filter(f.name, eval(*f.input, scope), eval_args(f.args, scope));
    }
    case ExprKind::Test: {
      const auto& t = static_cast<const FilterExpr&>(expr);
      return Value::boolean(apply_test(t.name, eval(*t.input, scope), eval_args(t.args, scope)));
    }
    case ExprKind::Not:
      return Value::boolean(!truthy(eval(*static_cast<const UnaryExpr&>(expr).operand, scope)));
    case ExprKind::Neg:
    case ExprKind::Pos: {
      Value v = eval(*static_cast<const UnaryExpr&>(expr).operand, scope);
      require_defined(v);
      bool neg = expr.kind == ExprKind::Neg;
      if (v.is_float()) return Value::number(neg ? -v.as_double() : v.as_double());
      if (v.is_int() || v.is_bool()) return Value::integer(neg ? -v.as_int() : v.as_int());
      raise("TypeError: bad operand type for unary {}: '{}'", neg ? "-" : "+", type_name(v));
    }
    case ExprKind::Binary: {
      const auto& b = static_cast<const BinaryExpr&>(expr);
      Value left = eval(*b.left, scope);
      return arithmetic(b.op, left, eval(*b.right, scope));
    }
    case ExprKind::And:
    case ExprKind::Or: {
      const auto& b = static_cast<const BinaryExpr&>(expr);
      Value left = eval(*b.left, scope);
      bool short_circuit = expr.kind == ExprKind::And ? !truthy(left) : truthy(left);
      return short_circuit ? left : eval(*b.right, scope);
    }
    case ExprKind::Concat: {
      std::string out;
      for (const ExprPtr& e : static_cast<const ConcatExpr&>(expr).items) out += to_str(eval(*e, scope));
      return Value::string(out);
    }
    case ExprKind::Compare:
      return eval_compare(static_cast<const CompareExpr&>(expr), scope);
    case ExprKind::Conditional: {
      const auto& c = static_cast<const ConditionalExpr&>(expr);
      if (truthy(eval(*c.test, scope))) return eval(*c.then, scope);
      if (c.otherwise) return eval(*c.otherwise, scope);
      return Value::undefined(fmt::format(
          "the inline if-expression on line {} evaluated to false and no else section was defined.",
          expr.loc.line));
    }
    case ExprKind::Slice:
      raise("TemplateSyntaxError: a slice is only valid inside []");
    case ExprKind::NamespaceRef:
      raise("TemplateSyntaxError: namespace references are only valid in set");
  }
  raise("internal error: unknown expression");
}

}  // namespace ds::jinja
