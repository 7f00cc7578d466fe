#pragma once
// A stream's state as a backend other than the CPU keeps it (device buffers), carried inside StreamState so
// the engine, the prompt cache and draft rollback treat every backend's states alike: copying a StreamState
// copies this too (a snapshot), assigning a copy back restores it. Empty on the CPU backend, which costs
// nothing.
#include <cstddef>
#include <memory>
#include <utility>

namespace ds {

class BackendState {
 public:
  virtual ~BackendState() = default;
  virtual std::unique_ptr<BackendState> clone() const = 0;  // a deep copy (device to device)
  virtual size_t bytes() const = 0;                         // memory held, for accounting
};

// Value semantics over a BackendState: copies are deep, moves are cheap.
class BackendStateSlot {
 public:
  BackendStateSlot() = default;
  explicit BackendStateSlot(std::unique_ptr<BackendState> s) : state_(std::move(s)) {}
  BackendStateSlot(const BackendStateSlot& o) : state_(o.state_ ? o.state_->clone() : nullptr) {}
  BackendStateSlot& operator=(const BackendStateSlot& o) {
    if (this != &o) state_ = o.state_ ? o.state_->clone() : nullptr;
    return *this;
  }
  BackendStateSlot(BackendStateSlot&&) noexcept = default;
  BackendStateSlot& operator=(BackendStateSlot&&) noexcept = default;

  BackendState* get() const { return state_.get(); }
  size_t bytes() const { return state_ ? state_->bytes() : 0; }

 private:
  std::unique_ptr<BackendState> state_;
};

}  // namespace ds
