#pragma once
// Where draft tokens come from (n-gram copies, the MTP head). A source only proposes: the verify
// window decides, so a bad proposal costs time and never changes a reply.
#include <cstdint>
#include <span>
#include <vector>

#include "model/stream_state.h"

namespace ds {

// One stream's question for this round.
struct DraftAsk {
  std::span<const int32_t> prompt, reply;  // the stream's tokens so far; reply ends with the last drawn token
  StreamState* state = nullptr;            // for sources that run the model (MTP); at the last drawn token
  int max = 0;                             // drafts wanted at most
  // The depth the policy would verify if `max` were offered, counting the MTP head's own calls: a chained
  // source drafts that deep, and runs no head rows at all for a hint of 0 (drafting does not pay).
  int depth_hint = 0;
  std::vector<int32_t> drafts;  // out: the tokens proposed to follow, at most max
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Fills every ask's drafts (possibly none). All asks of a round come together, so a model-based source
  // can batch them into one call.
  virtual void propose(std::span<DraftAsk> asks) = 0;
  // Whether the engine should capture every row's H (ForwardSegment::hidden, kept in the state's
  // mtp_pending) and keep the head's cache; a source that runs the head consumes the pending rows it ran.
  virtual bool uses_hidden() const { return false; }
};

}  // namespace ds
