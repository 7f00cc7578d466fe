// The one-row (R = 1) weight-product kernels and the process-wide choice between them (RowKernel,
// wx_products.h). Every choice gives the same bits: the chains of docs/cuda-products.md "The arithmetic".
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>

#include "backend/cuda/cuda_error.h"
#include "backend/cuda/env_switch.h"
#include "backend/cuda/grid_dependency.cuh"
#include "backend/cuda/kernel_limits.h"
#include "backend/cuda/wx_kernels.cuh"
#include "backend/cuda/wx_launch.cuh"
#include "backend/cuda/wx_products.h"
#include "backend/cuda/wx_row.cuh"
#include "backend/cuda/wx_row_choice.h"

namespace ds::cuda {
namespace {

RowKernel one_row_kernel_from_env() {
  const char* v = std::getenv("DS_CUDA_ROW_KERNEL");
  if (v == nullptr || *v == '\0') return RowKernel::PairedStaged;
  for (RowKernel k :
       {RowKernel::Lockstep, RowKernel::LockstepExact, RowKernel::Paired, RowKernel::PairedStaged})
    if (std::strcmp(v, one_row_kernel_name(k)) == 0) return k;
  throw ArgumentError(
      std::string("DS_CUDA_ROW_KERNEL must be lockstep, lockstep-exact, paired or paired-staged (got '") + v +
      "')");
}

std::atomic<int> chosen{-1};         // -1: not read from the environment yet
std::atomic<int64_t> min_tasks{-1};  // -1: 2 x the SMs

}  // namespace

std::atomic<bool> grouped_on{true};
std::atomic<bool> row_loads_first_on{kDefaultRowLoadsFirst};

void set_row_loads_first(bool on) {
  row_loads_first_on = on;
}

bool row_loads_first() {
  return env_on_off("DS_CUDA_LOADS_FIRST", row_loads_first_on.load());
}

void set_paired_grouped(bool on) {
  grouped_on = on;
}

bool paired_grouped() {
  return grouped_on.load();
}

void set_paired_min_tasks(int64_t n) {
  min_tasks = n;
}

int64_t paired_min_tasks() {
  const int64_t n = min_tasks.load();
  if (n >= 0) return n;
  static const std::optional<int64_t> from_env = []() -> std::optional<int64_t> {
    if (const char* v = std::getenv("DS_CUDA_PAIRED_MIN_TASKS"); v != nullptr && *v != '\0')
      return static_cast<int64_t>(std::atoll(v));
    return std::nullopt;  // unset: twice the current device's multiprocessors
  }();
  return from_env ? *from_env : int64_t{2} * multiprocessors("paired_min_tasks: multiprocessor count");
}

const char* one_row_kernel_name(RowKernel k) {
  switch (k) {
    case RowKernel::Lockstep:
      return "lockstep";
    case RowKernel::LockstepExact:
      return "lockstep-exact";
    case RowKernel::Paired:
      return "paired";
    default:
      return "paired-staged";
  }
}

void set_one_row_kernel(RowKernel k) {
  chosen = static_cast<int>(k);
}

RowKernel one_row_kernel() {
  int k = chosen.load();
  if (k < 0) {
    k = static_cast<int>(one_row_kernel_from_env());
    chosen = k;
  }
  return static_cast<RowKernel>(k);
}

namespace detail {
namespace {

// v3 (RowKernel::Lockstep / LockstepExact): 4 outputs a warp, the lanes in lockstep over units l, l + 32S,
// ... At most 128 registers: 4 blocks (16 warps) per SM.
template <class Unit, class Rows>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, 4)
    row_kernel(typename Unit::Matrix m, int64_t n_out, Rows rows, float* y) {
  persistent_row_product<Unit, Rows>(m, n_out, rows, y);
}

// Two halves a warp (wx_row.cuh), x read through L1 (kStaged false) or staged once per block in shared memory
// as f32 (dynamic shared memory: staged_row_bytes(cols)).
// kLoadsFirst (staged only; row_loads_first()): x staged by stage_row_grouped and the first task's item 1
// loaded before the wait (paired_row_product's kLoadsFirst), the same bits.
template <class Unit, class Rows, bool kStaged, bool kLoadsFirst = false>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, 4)
    paired_row_kernel(typename Unit::Matrix m, int64_t n_out, Rows rows, float* y) {
  if constexpr (kStaged) {
    extern __shared__ float4 staged[];
    float* xs = reinterpret_cast<float*>(staged);
    if constexpr (kLoadsFirst) {
      auto stage_grouped = [&] { stage_row_grouped(rows, m.cols, xs); };
      paired_row_product<Unit, StagedRow, decltype(stage_grouped), true>(m, n_out, StagedRow{xs}, y,
                                                                         stage_grouped);
    } else {
      paired_row_product<Unit, StagedRow>(m, n_out, StagedRow{xs}, y, [&] { stage_row(rows, m.cols, xs); });
    }
  } else {
    paired_row_product<Unit, Rows>(m, n_out, rows, y, [] {});
  }
}

// The lockstep kernel of a unit type with v3's folded scales (affine) or the unit itself (dense).
template <class Unit>
struct Folded {
  using type = Unit;
};
template <int Bits>
struct Folded<AffineUnit<Bits>> {
  using type = AffineUnit<Bits, true>;
};

// Blocks resident at once of a kernel with `smem` bytes of dynamic shared memory, from the occupancy API once
// per (kernel, device, 1 KB of shared memory up to 64 KB) (kernel_limits.h).
template <auto Kernel>
int64_t resident_blocks_with(int64_t tasks, size_t smem) {
  const size_t kb = std::min<size_t>((smem + 1023) / 1024, 64);
  return std::min(tasks,
                  blocks_resident(Kernel, kWarpsPerBlock * 32, kb * 1024, "resident blocks (occupancy)"));
}

// Without an opt-in a block has 48 KB of shared memory: rows up to 10,912 columns are staged, wider ones
// read x through L1.
constexpr int64_t kMaxStagedBytes = 48 * 1024;

}  // namespace

template <class Unit, class Rows>
void launch_row(const typename Unit::Matrix& m, int64_t n_out, const Rows& rows, float* y,
                cudaStream_t stream) {
  if (n_out >= (int64_t{1} << 31)) bad_arg("one-row product", "rows must be fewer than 2^31");
  const int slices = column_slices<Unit>(n_out, m.cols);
  const dim3 block(kWarpsPerBlock * 32);
  RowKernel k = one_row_kernel();
  if (k == RowKernel::PairedStaged && staged_row_bytes(m.cols) > kMaxStagedBytes) k = RowKernel::Paired;
  const int64_t paired_per_block = int64_t(kWarpsPerBlock / slices) * kPairedOutputsPerWarp;
  if ((k == RowKernel::Paired || k == RowKernel::PairedStaged) &&
      (n_out + paired_per_block - 1) / paired_per_block < paired_min_tasks())
    k = RowKernel::LockstepExact;
  if (k == RowKernel::Lockstep || k == RowKernel::LockstepExact) {
    const int64_t per_block = int64_t(kWarpsPerBlock / slices) * kOutputsPerWarp;
    const int64_t tasks = (n_out + per_block - 1) / per_block;
    if (k == RowKernel::Lockstep) {
      constexpr auto kernel = row_kernel<typename Folded<Unit>::type, Rows>;
      kernel<<<static_cast<unsigned>(resident_blocks<kernel>(tasks)), block, 0, stream>>>(m, n_out, rows, y);
    } else {
      constexpr auto kernel = row_kernel<Unit, Rows>;
      kernel<<<static_cast<unsigned>(resident_blocks<kernel>(tasks)), block, 0, stream>>>(m, n_out, rows, y);
    }
    return;
  }
  const int64_t per_block = int64_t(kWarpsPerBlock / slices) * kPairedOutputsPerWarp;
  const int64_t tasks = (n_out + per_block - 1) / per_block;
  if (k == RowKernel::Paired) {
    constexpr auto kernel = paired_row_kernel<Unit, Rows, false>;
    kernel<<<static_cast<unsigned>(resident_blocks<kernel>(tasks)), block, 0, stream>>>(m, n_out, rows, y);
  } else if (row_loads_first()) {
    constexpr auto kernel = paired_row_kernel<Unit, Rows, true, true>;
    const size_t smem = static_cast<size_t>(staged_row_bytes(m.cols));
    kernel<<<static_cast<unsigned>(resident_blocks_with<kernel>(tasks, smem)), block, smem, stream>>>(
        m, n_out, rows, y);
  } else {
    constexpr auto kernel = paired_row_kernel<Unit, Rows, true>;
    const size_t smem = static_cast<size_t>(staged_row_bytes(m.cols));
    kernel<<<static_cast<unsigned>(resident_blocks_with<kernel>(tasks, smem)), block, smem, stream>>>(
        m, n_out, rows, y);
  }
}

#define DS_LAUNCH_ROW(UNIT)                                                                       \
  template void launch_row<UNIT, F32Rows>(const UNIT::Matrix&, int64_t, const F32Rows&, float*,   \
                                          cudaStream_t);                                          \
  template void launch_row<UNIT, Bf16Rows>(const UNIT::Matrix&, int64_t, const Bf16Rows&, float*, \
                                           cudaStream_t);
DS_LAUNCH_ROW(AffineUnit<2>)
DS_LAUNCH_ROW(AffineUnit<3>)
DS_LAUNCH_ROW(AffineUnit<4>)
DS_LAUNCH_ROW(AffineUnit<5>)
DS_LAUNCH_ROW(AffineUnit<6>)
DS_LAUNCH_ROW(AffineUnit<8>)
DS_LAUNCH_ROW(DenseBf16Unit)
#undef DS_LAUNCH_ROW

}  // namespace detail
}  // namespace ds::cuda
