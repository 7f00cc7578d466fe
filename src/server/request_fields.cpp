#include "server/request_fields.h"

#include <fmt/format.h>

#include <cmath>

#include "server/api_error.h"

namespace ds::server {

Json parse_request_body(std::string_view body) {
  Json j;
  try {
    j = Json::parse(body);
  } catch (const Json::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ... - invalid string:
    // ill-formed UTF-8 byte; last read: '...'": the place and the reason, not the bytes read (which may not
    // be UTF-8). A number past a double's range is out_of_range.406: "number overflow parsing '1e400'".
    std::string what = e.what();
    if (auto tag = what.find("] "); what.starts_with("[json.exception") && tag != std::string::npos)
      what.erase(0, tag + 2);
    if (auto last = what.find("; last read"); last != std::string::npos) what.resize(last);
    reject("", fmt::format("the request body is not valid JSON: {}", what));
  }
  if (!j.is_object())
    reject("", fmt::format("the request body must be a JSON object, got {}", json_type_name(j)));
  return j;
}

const Json* field(const Json& object, const char* name) {
  auto it = object.find(name);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

const char* json_type_name(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

std::optional<bool> read_bool(const Json& object, const char* name) {
  const Json* v = field(object, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) reject(name, fmt::format("'{}' must be a boolean, got {}", name, json_type_name(*v)));
  return v->get<bool>();
}

std::optional<std::string> read_string(const Json& object, const char* name) {
  const Json* v = field(object, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) reject(name, fmt::format("'{}' must be a string, got {}", name, json_type_name(*v)));
  return v->get<std::string>();
}

std::optional<int64_t> read_int(const Json& object, const char* name, int64_t min, int64_t max) {
  const Json* v = field(object, name);
  if (!v) return std::nullopt;
  int64_t value = 0;
  if (v->is_number_integer()) {
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      reject(name, fmt::format("'{}' must be at most {}, got {}", name, max, v->dump()));
    value = v->get<int64_t>();
  } else if (v->is_number_float() && std::isfinite(v->get<double>()) &&
             v->get<double>() == std::trunc(v->get<double>())) {
    // Integers past 64 bits arrive as floats (1e30, 99999999999999999999): out of range, not "not integers".
    if (std::fabs(v->get<double>()) >= 9.0e18)
      reject(name, fmt::format("'{}' must be in [{}, {}], got {}", name, min, max, v->dump()));
    value = static_cast<int64_t>(v->get<double>());
  } else {
    reject(name, fmt::format("'{}' must be an integer, got {}", name,
                             v->is_number() ? v->dump() : std::string(json_type_name(*v))));
  }
  if (value < min || value > max)
    reject(name, fmt::format("'{}' must be in [{}, {}], got {}", name, min, max, value));
  return value;
}

std::optional<double> read_number(const Json& object, const char* name) {
  const Json* v = field(object, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) reject(name, fmt::format("'{}' must be a number, got {}", name, json_type_name(*v)));
  return v->get<double>();
}

}  // namespace ds::server
