#pragma once
// The one exception type: every message names what was wrong (the file, the tensor, the field).
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace ds {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace ds
