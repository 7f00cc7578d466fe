#pragma once
// Values of the chat-template language: the Python objects jinja2 templates see (str, int, float, bool, None,
// list, tuple, dict, Undefined, namespace, callables), with Python's printing, equality and truthiness.
#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ds::jinja {

class Value;

// An error raised while evaluating; the interpreter adds the template position before it reaches the caller.
class EvalError : public std::runtime_error {
 public:
  explicit EvalError(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void raise(fmt::format_string<Args...> format, Args&&... args) {
  throw EvalError(fmt::format(format, std::forward<Args>(args)...));
}

// A list or a tuple: tuples only differ in how they print and in what they concatenate with.
struct ListData {
  std::vector<Value> items;
  bool tuple = false;
};

// A dict in insertion order, as Python's; keys are strings (JSON objects and template literals).
struct DictData {
  std::vector<std::pair<std::string, Value>> items;
  const Value* find(std::string_view key) const;
  void set(std::string key, Value value);
};

// Objects with attributes only (namespace(), loop, joiner): not mappings, not sequences.
class Object {
 public:
  virtual ~Object() = default;
  virtual std::string type_name() const = 0;
  virtual Value attribute(const std::string& name) const = 0;
  // Only namespaces accept `{% set ns.attr = ... %}`.
  virtual bool set_attribute(const std::string& name, Value value);
  virtual std::string repr() const;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keywords;
  const Value* keyword(std::string_view name) const;
};

struct Function {
  std::string name;
  std::function<Value(const CallArgs&)> call;
};

class Value {
 public:
  enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Object, Function };

  Value() = default;  // Undefined with no name
  static Value undefined(std::string hint = {});
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value number(double d);
  static Value string(std::string s, bool markup = false);
  static Value list(std::vector<Value> items, bool tuple = false);
  static Value dict(DictData d);
  static Value object(std::shared_ptr<Object> o);
  static Value function(std::string name, std::function<Value(const CallArgs&)> call);

  Kind kind() const { return static_cast<Kind>(storage_.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }  // bool is an int in Python
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_tuple() const { return is_list() && as_list().tuple; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_object() const { return kind() == Kind::Object; }
  bool is_function() const { return kind() == Kind::Function; }
  // Markup comes from `|safe`: `+` with it HTML-escapes the other string, as markupsafe does.
  bool is_markup() const { return is_string() && markup_; }

  bool as_bool() const { return std::get<bool>(storage_); }
  int64_t as_int() const;    // Int or Bool
  double as_double() const;  // any number
  const std::string& as_string() const { return std::get<std::string>(storage_); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(storage_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(storage_); }
  Object& as_object() const { return *std::get<std::shared_ptr<Object>>(storage_); }
  const Function& as_function() const { return *std::get<std::shared_ptr<const Function>>(storage_); }
  const std::string& undefined_hint() const { return std::get<UndefinedTag>(storage_).hint; }
  // The same object (Python `is`) for reference types.
  bool same_object(const Value& other) const;

 private:
  struct UndefinedTag {
    std::string hint;  // the error jinja2 would give when this is used, e.g. "'x' is undefined"
  };
  struct NoneTag {};
  using Storage =
      std::variant<UndefinedTag, NoneTag, bool, int64_t, double, std::string, std::shared_ptr<const ListData>,
                   std::shared_ptr<const DictData>, std::shared_ptr<Object>, std::shared_ptr<const Function>>;
  Storage storage_;
  bool markup_ = false;
};

// Python's type name, for error messages ("'int' object is not iterable").
std::string type_name(const Value& v);
// Python truthiness (Undefined is false).
bool truthy(const Value& v);
// Python str(): what `{{ v }}` prints.
std::string to_str(const Value& v);
// Python repr(): how values print inside lists and dicts.
std::string repr(const Value& v);
// Python ==.
bool equals(const Value& a, const Value& b);
// Python's <, as -1/0/1; raises TypeError for unordered types.
int compare(const Value& a, const Value& b, std::string_view op);
// Python len(); raises for values without a length.
size_t length(const Value& v);
// The items `for x in v` visits: list items, dict keys, string characters; Undefined gives none.
std::vector<Value> iterate(const Value& v);
// Python `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);
// Raises the UndefinedError jinja2 raises when an Undefined is used for more than printing or testing.
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace ds::jinja
