#include "model/window_record.h"

#include <algorithm>

#include "core/error.h"
#include "model/layers/ple.h"

namespace ds {
namespace {

// The history a causal conv keeps after `keep` window rows: rows keep .. keep+hist-1 of history + window.
void keep_history(const std::vector<float>& recorded, int64_t count, int64_t keep,
                  std::vector<float>& history) {
  if (recorded.empty() || history.empty()) return;
  const int64_t hist = static_cast<int64_t>(history.size());
  const int64_t width = (static_cast<int64_t>(recorded.size()) - hist) / count;
  std::copy(recorded.begin() + keep * width, recorded.begin() + keep * width + hist, history.begin());
}

}  // namespace

void WindowRecord::begin(const StreamState& state, const int32_t* t, int64_t n, int layers) {
  pos0 = state.position;
  count = n;
  tokens.assign(t, t + n);
  ple_context = state.ple_context;
  deltanet_conv.resize(layers);
  deltanet_state.resize(layers);
  ple_conv.resize(layers);
  for (int l = 0; l < layers; ++l) {
    deltanet_conv[l].clear();
    deltanet_state[l].clear();
    ple_conv[l].clear();
  }
}

void rewind_window(const ModelConfig& c, const WindowRecord& rec, int64_t keep, StreamState& st) {
  if (keep < 1 || keep > rec.count)
    fail("rewind_window: keep {} is outside the window's 1..{} rows", keep, rec.count);
  if (st.position != rec.pos0 + rec.count)
    fail("rewind_window: the state is at position {}, not at the recorded window's end {}", st.position,
         rec.pos0 + rec.count);
  if (keep == rec.count) return;
  const int64_t pos = rec.pos0 + keep, kvw = c.n_kv_heads * c.head_dim, ihd = c.indexer_head_dim;
  for (size_t l = 0; l < st.deltanet.size(); ++l) {
    DeltaNetState& d = st.deltanet[l];
    if (d.state.empty()) continue;
    if (rec.deltanet_state[l].size() != d.state.size() * static_cast<size_t>(rec.count))
      fail("rewind_window: layer {} has no DeltaNet record for this window", l);
    keep_history(rec.deltanet_conv[l], rec.count, keep, d.conv);
    const auto from = rec.deltanet_state[l].begin() + (keep - 1) * static_cast<int64_t>(d.state.size());
    std::copy(from, from + static_cast<int64_t>(d.state.size()), d.state.begin());
  }
  for (size_t l = 0; l < st.ple.size(); ++l) {
    if (st.ple[l].conv.empty()) continue;
    if (rec.ple_conv[l].size() < st.ple[l].conv.size())
      fail("rewind_window: layer {} has no PLE record for this window", l);
    keep_history(rec.ple_conv[l], rec.count, keep, st.ple[l].conv);
  }
  // Main-model layers only: the MTP head's cache (slots past the layers) follows truncate_mtp.
  for (size_t l = 0; l < st.deltanet.size() && l < st.attention.size(); ++l) {
    AttentionState& a = st.attention[l];
    a.keys.resize(std::min(a.keys.size(), static_cast<size_t>(pos * kvw)));
    a.values.resize(std::min(a.values.size(), static_cast<size_t>(pos * kvw)));
    if (ihd > 0 && c.indexer_ratio > 0) {
      a.index_keys.resize(std::min(a.index_keys.size(), static_cast<size_t>(pos * ihd)));
      // Blocks completed inside the dropped rows are pooled again, from the same keys, when they refill.
      a.index_blocks.resize(
          std::min(a.index_blocks.size(), static_cast<size_t>(pos / c.indexer_ratio * ihd)));
    }
  }
  if (!st.ple_context.empty()) {
    st.ple_context = rec.ple_context;
    ple_advance_context(st.ple_context, rec.tokens.data(), keep);
  }
  st.position = pos;
}

}  // namespace ds
