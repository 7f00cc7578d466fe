#pragma once
// What the server needs from the runtime: ds::Engine's submit / cancel / stats, behind an interface so routes
// can be tested against a scripted backend.
#include <cstdint>

#include "runtime/engine.h"

namespace ds::server {

class GenerationBackend {
 public:
  virtual ~GenerationBackend() = default;
  // As Engine::submit: throws ds::Error naming the problem ("queue full ..." when admission refuses).
  virtual uint64_t submit(GenerationRequest request, TokenCallback on_event) = 0;
  virtual void cancel(uint64_t id) = 0;
  virtual EngineStats stats() const = 0;
};

// Any engine with Engine's member functions; a template so the server links without the runtime's sources.
template <typename EngineType>
class EngineBackend : public GenerationBackend {
 public:
  explicit EngineBackend(EngineType& engine) : engine_(engine) {}
  uint64_t submit(GenerationRequest request, TokenCallback on_event) override {
    return engine_.submit(std::move(request), std::move(on_event));
  }
  void cancel(uint64_t id) override { engine_.cancel(id); }
  EngineStats stats() const override { return engine_.stats(); }

 private:
  EngineType& engine_;
};

}  // namespace ds::server
