// CudaModel's state copies (prompt-cache snapshots, draft rollback): device-to-device copies on the model's
// stream, so they stay ordered with the forward passes around them.
#include <algorithm>

#include "backend/cuda/model/cuda_model.h"
#include "backend/cuda/model/kept_rows.h"
#include "core/error.h"

namespace ds::cuda {

namespace {

void copy_async(void* to, const void* from, size_t bytes, cudaStream_t st, const char* op) {
  if (bytes > 0) check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDeviceToDevice, st), op);
}

}  // namespace

// Each recurrent region runs from its offset to the next region's (the state layout packs regions in order,
// each padded), so the ranges follow the layout whatever sizes it gives them.
std::vector<std::pair<int64_t, int64_t>> CudaModel::recurrent_ranges() const {
  std::vector<int64_t> starts;
  for (const auto* offs :
       {&conv_off_, &rec_off_, &keys_off_, &values_off_, &ikeys_off_, &iblocks_off_, &ple_off_})
    for (int64_t o : *offs)
      if (o >= 0) starts.push_back(o);
  std::sort(starts.begin(), starts.end());
  starts.push_back(state_floats_);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto* offs : {&conv_off_, &rec_off_, &ple_off_})
    for (int64_t o : *offs)
      if (o >= 0) ranges.push_back({o, *std::upper_bound(starts.begin(), starts.end(), o) - o});
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto& r : ranges)
    if (!merged.empty() && merged.back().first + merged.back().second == r.first)
      merged.back().second += r.second;
    else
      merged.push_back(r);
  return merged;
}

size_t CudaModel::recurrent_bytes() const {
  int64_t n = 0;
  for (const auto& r : recurrent_ranges()) n += r.second;
  return static_cast<size_t>(n) * sizeof(float);
}

void CudaModel::copy_state(const CudaStreamState& from, CudaStreamState& to) const {
  const std::lock_guard lock(capture_mutex_);  // a clone (prompt-cache snapshot) runs outside forward calls
  if (from.device.bytes() != state_bytes() || to.device.bytes() != state_bytes())
    fail("CudaModel::copy_state: a state was not made by this model (bytes {} and {}, expected {})",
         from.device.bytes(), to.device.bytes(), state_bytes());
  copy_async(to.device.data(), from.device.data(), state_bytes(), stream_.get(), "CudaModel::copy_state");
  to.position = from.position;
  to.ple_context = from.ple_context;
  to.mtp_position = from.mtp_position;
  // The head's kept rows travel with the state (a snapshot resumes with the head in step): only the rows
  // held, into a ring sized for them (kept_rows.h), not the whole ring (a 2048-row prompt piece grows it to
  // 2048 rows, 80 MiB at Flash Next, for the few rows the head has yet to read).
  const cudaStream_t st = stream_.get();
  const KeptHiddenRows& k = from.kept;
  const int64_t held = std::max<int64_t>(k.end - k.first, 0);
  if (held > k.capacity)
    fail("CudaModel::copy_state: the kept rows {}..{} do not fit their ring of {}", k.first, k.end,
         k.capacity);
  const int64_t W = mtp_hidden_width(), capacity = std::min(kept_ring_rows(held), k.capacity);
  const size_t row_bytes = static_cast<size_t>(W) * sizeof(float);
  auto same_size = [&](DeviceBuffer& buffer, size_t bytes) {
    if (buffer.bytes() == bytes) return;
    if (buffer.bytes() > 0) check(cudaStreamSynchronize(st), "CudaModel::copy_state");  // may be read still
    buffer = DeviceBuffer(bytes);
  };
  same_size(to.kept.ring, static_cast<size_t>(capacity) * row_bytes);
  same_size(to.kept.last_out, k.last_out.bytes());
  for (const KeptRowRun& r : kept_row_runs(k.first, k.first + held, k.capacity, capacity))
    copy_async(to.kept.ring.as<char>() + static_cast<size_t>(r.to_slot) * row_bytes,
               k.ring.as<char>() + static_cast<size_t>(r.from_slot) * row_bytes,
               static_cast<size_t>(r.rows) * row_bytes, st, "CudaModel::copy_state");
  copy_async(to.kept.last_out.data(), k.last_out.data(), k.last_out.bytes(), st, "CudaModel::copy_state");
  to.kept.capacity = capacity, to.kept.first = k.first, to.kept.end = k.first + held;
}

void CudaModel::reserve_kept_rows(CudaStreamState& state, int64_t first, int64_t end) const {
  const std::lock_guard lock(capture_mutex_);
  KeptHiddenRows& k = state.kept;
  if (first < 0 || end <= first || end <= state.position)
    fail("CudaModel::reserve_kept_rows: positions {}..{} for a state at {}", first, end, state.position);
  // Rows held from `first` on stay; with none, the ring starts at the call's first row.
  if (k.end <= std::max(k.first, first)) k.first = k.end = state.position;
  k.first = std::max(k.first, first);
  const int64_t need = end - k.first, rows = std::max<int64_t>(64, (need + 63) / 64 * 64);
  if (k.capacity >= need && k.capacity <= 4 * rows) return;
  // A new ring (grown for a prompt piece, or shrunk after one): the held rows copied to their new slots.
  const cudaStream_t st = stream_.get();
  const int64_t W = mtp_hidden_width();
  KeptHiddenRows grown;
  grown.capacity = rows, grown.first = k.first, grown.end = k.end;
  grown.ring = DeviceBuffer(static_cast<size_t>(rows * W) * sizeof(float));
  check(cudaMemsetAsync(grown.ring.data(), 0, grown.ring.bytes(), st), "CudaModel::reserve_kept_rows");
  for (int64_t p = k.first; p < k.end; ++p)
    copy_async(grown.row(p, W), k.row(p, W), static_cast<size_t>(W) * sizeof(float), st,
               "CudaModel::reserve_kept_rows");
  if (k.ring.bytes() > 0) check(cudaStreamSynchronize(st), "CudaModel::reserve_kept_rows");  // old ring read
  grown.last_out = std::move(k.last_out);
  k = std::move(grown);
}

void CudaModel::save_recurrent(const CudaStreamState& from, DeviceBuffer& to) const {
  const std::lock_guard lock(capture_mutex_);
  if (from.device.bytes() != state_bytes())
    fail("CudaModel::save_recurrent: the state was not made by this model");
  const size_t need = recurrent_bytes();
  if (to.bytes() != need) to = DeviceBuffer(need);
  size_t at = 0;
  for (const auto& [first, floats] : recurrent_ranges()) {
    copy_async(to.as<char>() + at, from.device.as<float>() + first, floats * sizeof(float), stream_.get(),
               "CudaModel::save_recurrent");
    at += floats * sizeof(float);
  }
}

void CudaModel::restore_recurrent(const DeviceBuffer& from, CudaStreamState& to) const {
  const std::lock_guard lock(capture_mutex_);  // rewind runs outside the engine's forward mutex
  if (to.device.bytes() != state_bytes() || from.bytes() != recurrent_bytes())
    fail("CudaModel::restore_recurrent: the state or the saved parts were not made by this model");
  size_t at = 0;
  for (const auto& [first, floats] : recurrent_ranges()) {
    copy_async(to.device.as<float>() + first, from.as<char>() + at, floats * sizeof(float), stream_.get(),
               "CudaModel::restore_recurrent");
    at += floats * sizeof(float);
  }
}

}  // namespace ds::cuda
