#pragma once
// The MTP draft head's weights (docs/mtp.md): bound from `mtp.*` when the config declares one MTP layer and
// the checkpoint ships the head's tensors. Model::mtp_forward (mtp.cpp) runs it.
#include <vector>

#include "formats/checkpoint.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace ds {

struct MtpWeights {
  bool present = false;
  std::vector<float> norm_embedding;     // [D], effective multiplier
  std::vector<float> norm_hidden;        // [S*D] joint norm (qwen4_exp) or [D] (qwen3_next)
  MatrixWeight fc_embedding, fc_hidden;  // qwen4_exp: [D, D] each, fc_hidden applied per stream
  MatrixWeight fc;                       // qwen3_next: [D, 2D] over concat(embedding, hidden)
  LayerWeights layer;                    // one attention decoder layer, no PLE
  HyperConnectionWeights mixer;          // qwen4_exp: the head's own final mixer
  std::vector<float> norm;               // qwen3_next: the head's final norm
};

// Whether any stored tensor belongs to `mtp.` (under any layout prefix).
bool checkpoint_has_mtp_tensors(const Checkpoint& ckpt);
// The head, or present == false when the config declares none (or more than one layer), the family has no
// head form, or the checkpoint ships no `mtp.*` tensors; throws naming a missing or mis-shaped head tensor.
MtpWeights bind_mtp(const Checkpoint& ckpt, const ModelConfig& cfg);

}  // namespace ds
