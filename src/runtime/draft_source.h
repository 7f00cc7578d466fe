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
  int depth_hint =
      0;  // the depth the policy would verify if `max` were offered (a chained source stops there)
  // The MTP head's pending H rows (positions state->mtp_position..), owned by the stream; null when not
  // captured. A source that runs the head consumes (erases) the rows it ran.
  std::vector<float>* hidden = nullptr;
  std::vector<int32_t> drafts;  // out: the tokens proposed to follow, at most max
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Fills every ask's drafts (possibly none). All asks of a round come together, so a model-based source
  // can batch them into one call.
  virtual void propose(std::span<DraftAsk> asks) = 0;
  // Whether the engine should capture every row's H (ForwardSegment::hidden) and keep the head's cache.
  virtual bool uses_hidden() const { return false; }
};

}  // namespace ds
