#pragma once
// The MTP head alone (n-gram copies never match), recording every proposal so tests can see what it drafted.
#include <mutex>
#include <span>
#include <vector>

#include "runtime/draft_source.h"
#include "runtime/mtp_drafter.h"

namespace ds::test {

class HeadOnly final : public DraftSource {
 public:
  // `source`: a Model or a ModelBackend, as MtpDrafter takes them.
  template <class Source>
  explicit HeadOnly(const Source& source) : head_(source, NgramOptions{1000, 1000, 4096}) {}
  void propose(std::span<DraftAsk> asks) override {
    head_.propose(asks);
    std::lock_guard lock(mutex_);
    for (const DraftAsk& a : asks) proposals.push_back(a.drafts);
  }
  bool uses_hidden() const override { return true; }
  std::vector<std::vector<int32_t>> proposals;

 private:
  MtpDrafter head_;
  std::mutex mutex_;
};

}  // namespace ds::test
