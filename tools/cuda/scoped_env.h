#pragma once
// An environment variable changed for a scope and put back as it was when the scope ends, by return or by
// exception: the checks and benches (cuda_wx_check, cuda_model_check) flip process switches that the library
// reads at every call (DS_CUDA_*), and a check that throws must not leave its setting to the sections after
// it.
#include <cstdlib>
#include <string>

namespace ds::cuda {

class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name) : name_(name) {
    const char* v = std::getenv(name);
    had_ = v != nullptr;
    if (had_) was_ = v;
  }
  ScopedEnv(const char* name, const char* value) : ScopedEnv(name) { set(value); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { restore(); }
  // Back to the value at construction now (unset if it was unset); the destructor does it again.
  void restore() const {
    if (had_)
      setenv(name_.c_str(), was_.c_str(), 1);
    else
      unsetenv(name_.c_str());
  }
  void set(const char* value) const { setenv(name_.c_str(), value, 1); }
  void unset() const { unsetenv(name_.c_str()); }

 private:
  std::string name_, was_;
  bool had_ = false;
};

}  // namespace ds::cuda
