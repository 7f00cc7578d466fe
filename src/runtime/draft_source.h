#pragma once
// Where draft tokens come from (n-gram copies now, the MTP head next). A source only proposes: the verify
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
  std::vector<int32_t> drafts;             // out: the tokens proposed to follow, at most max
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Fills every ask's drafts (possibly none). All asks of a round come together, so a model-based source
  // can batch them into one call.
  virtual void propose(std::span<DraftAsk> asks) = 0;
};

}  // namespace ds
