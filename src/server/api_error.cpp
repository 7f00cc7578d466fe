#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace ds::server {

void reject(const std::string& param, const std::string& message, const std::string& code) {
  throw ApiError(400, message, param, code);
}

std::string error_body(const std::string& message, const std::string& type, const std::string& param,
                       const std::string& code) {
  nlohmann::ordered_json error = {{"message", message}, {"type", type}};
  error["param"] = param.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(param);
  error["code"] = code.empty() ? nlohmann::ordered_json() : nlohmann::ordered_json(code);
  // Replace, not throw: a message may quote invalid UTF-8 from the request.
  return nlohmann::ordered_json{{"error", error}}.dump(-1, ' ', false,
                                                       nlohmann::json::error_handler_t::replace);
}

std::string error_body(const ApiError& error) {
  return error_body(error.what(), error.type, error.param, error.code);
}

std::string exception_message(std::exception_ptr thrown) {
  try {
    std::rethrow_exception(thrown);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
  }
  return "an unknown exception";
}

}  // namespace ds::server
