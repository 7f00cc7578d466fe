#pragma once
// Typed reads of one JSON request field; a wrong type or range is a 400 naming the field. Null counts as
// absent.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace ds::server {

using Json = nlohmann::ordered_json;

// A request body that must be a JSON object; otherwise a 400 (param "") with the parser's place and reason
// (bad UTF-8 in a string included).
Json parse_request_body(std::string_view body);

// The field's value, or nullptr when absent or null.
const Json* field(const Json& object, const char* name);

std::optional<bool> read_bool(const Json& object, const char* name);
std::optional<std::string> read_string(const Json& object, const char* name);
// Integers; an integral float such as 3.0 is accepted (as pydantic's lax mode does).
std::optional<int64_t> read_int(const Json& object, const char* name, int64_t min, int64_t max);
std::optional<double> read_number(const Json& object, const char* name);

// "a boolean", "a string", ... for messages.
const char* json_type_name(const Json& value);

}  // namespace ds::server
