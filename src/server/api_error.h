#pragma once
// A request the server refuses: the HTTP status and the OpenAI error fields a client SDK turns into an
// exception.
#include <exception>
#include <string>

#include "core/error.h"

namespace ds::server {

class ApiError : public Error {
 public:
  ApiError(int status, std::string message, std::string param = "", std::string code = "",
           std::string type = "invalid_request_error")
      : Error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}

  int status;
  std::string type, param, code;
};

// A 400 naming the field; the message is prefixed by nothing, so it reads as written.
[[noreturn]] void reject(const std::string& param, const std::string& message, const std::string& code = "");

// {"error": {"message", "type", "param", "code"}} with null for an empty param or code.
std::string error_body(const ApiError& error);
std::string error_body(const std::string& message, const std::string& type, const std::string& param = "",
                       const std::string& code = "");

// What an exception of any type says: its what(), or "an unknown exception" for one that is no
// std::exception.
std::string exception_message(std::exception_ptr thrown);

}  // namespace ds::server
