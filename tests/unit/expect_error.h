#pragma once
// Test-only: the message of the ds::Error a callable throws, so tests can assert on what it names.
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace ds::test {

// The ds::Error message `f` throws; a test failure (and "") when it throws nothing.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a ds::Error";
  return "";
}

}  // namespace ds::test
