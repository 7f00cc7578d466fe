#pragma once
// Weight x activation products on the GPU for decode windows of 1-16 rows (docs/cuda-products.md):
// y[r*ldy + o] = sum_i W[o,i] * x[r*x.ld + i], fp32 accumulation, row invariant by construction.
#include <cuda_runtime.h>

#include <cstdint>

namespace ds::cuda {

constexpr int kMaxWindowRows = 16;

enum class ActType { F32, BF16 };

// Rows of activations in device memory: row r starts at data + r*ld elements (ld a multiple of 8, data
// 16-byte aligned).
struct Activations {
  const void* data = nullptr;
  ActType type = ActType::F32;
  int64_t ld = 0;
};

// MLX affine weight in device memory: `codes` [rows, cols*bits/32] little-endian bit stream of bits-wide
// codes, `scales`/`biases` bf16 [rows, cols/group]; value = scale*q + bias. bits 2,3,4,5,6,8; group 32, 64,
// 128. `codes` 16-byte aligned. For affine_wx_grouped the three arrays hold n_experts such matrices back to
// back ([E, rows, ...]); affine_wx takes one (n_experts == 1).
struct AffineWeight {
  const uint32_t* codes = nullptr;
  const uint16_t* scales = nullptr;
  const uint16_t* biases = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int bits = 4;
  int group = 64;
  int64_t n_experts = 1;
};

// Dense bf16 weight [rows, cols] in device memory (cols a multiple of 8).
struct DenseBf16Weight {
  const uint16_t* values = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
};

// One row of a grouped expert product: y row p = expert `expert` applied to x row `row`.
struct ExpertRow {
  int32_t expert;
  int32_t row;
};

// y = x W^T for n_rows in 1..16, enqueued on `stream`. The bits of y[r, o] depend only on x row r and W.
void affine_wx(const AffineWeight& w, const Activations& x, int n_rows, float* y, int64_t ldy,
               cudaStream_t stream);
void dense_wx(const DenseBf16Weight& w, const Activations& x, int n_rows, float* y, int64_t ldy,
              cudaStream_t stream);

// The kernel that runs one-row products (n_rows == 1) of affine_wx and dense_wx; every choice gives the same
// bits (docs/cuda-products.md "Kernels"). Process-wide; the default is DS_CUDA_ROW_KERNEL when set (its name,
// below), else PairedStaged; Paired and PairedStaged run lockstep-exact on shapes with too few tasks for them
// (wx_row_choice.h). For benches and checks.
enum class RowKernel {
  Lockstep,       // v3: 4 outputs a warp, lanes in lockstep, folded scales (main before fmarow)
  LockstepExact,  // v3's loop with the per-offset decode (no folded scales)
  Paired,         // 8 outputs a warp in two halves, lanes p and p ^ 16 on the same units; x through L1
  PairedStaged,   // Paired with x staged once per block in shared memory (rows up to 10,912 columns)
};
void set_one_row_kernel(RowKernel k);
RowKernel one_row_kernel();                    // throws ArgumentError for a bad DS_CUDA_ROW_KERNEL
const char* one_row_kernel_name(RowKernel k);  // lockstep, lockstep-exact, paired, paired-staged

// Grouped expert products in one launch: for each p < n_pairs, y[p*ldy + o] = sum_i W_e[o,i] * x[row*ld + i]
// with (e, row) = pairs[p] (`pairs` in device memory, row < n_x_rows). Each result equals affine_wx of that
// expert on that row alone, bit for bit. A pair out of range (checked on the device) yields NaN outputs.
// pairs_ready: the caller guarantees `pairs` was written two launches or more before this one on `stream`
// (in a programmatic chain every kernel waits before it lets the next one launch, so the kernel two back
// has completed when this one starts): the paired kernel then reads its first pair and issues its weights
// before its programmatic wait (grid_dependency.cuh). The same bits either way.
void affine_wx_grouped(const AffineWeight& w, const ExpertRow* pairs, int n_pairs, const Activations& x,
                       int n_x_rows, float* y, int64_t ldy, cudaStream_t stream, bool pairs_ready = false);

// affine_wx_grouped of gate|up matrices ([2 I, cols] per expert: gate rows, then up rows; I even) with
// SwiGLU in the same launch: h[p*ldh + i] = silu(gate_i) * up_i for i < I, the bits of affine_wx_grouped
// then silu_mul_halves (a warp computes gate i, i+1 and up i, i+1; each output's chain is unchanged).
void affine_wx_grouped_swiglu(const AffineWeight& w, const ExpertRow* pairs, int n_pairs,
                              const Activations& x, int n_x_rows, float* h, int64_t ldh, cudaStream_t stream);

// The MoE combine folded into the down products (affine_wx_grouped_combine), pairs as moe_route writes them:
// pair p < n_rows*K is (row p / K, rank p % K), then with shared_gate one pair per row for the stacked shared
// expert, whose gate logit is shared_gate[row * ld_gate]. out [n_rows, w.rows]; counters [n_rows,
// grouped_combine_tiles(w)], zero at the launch and left zero.
struct MoeCombineArgs {
  const float* weights = nullptr;  // [n_rows, K], rank order
  const float* shared_gate = nullptr;
  int64_t ld_gate = 1;
  float* out = nullptr;
  uint32_t* counters = nullptr;
  int n_rows = 0, K = 0;
};
int64_t grouped_combine_tiles(const AffineWeight& w);
// affine_wx_grouped into `slots`, and in the same launch, by the block that stores a (row, output tile)'s
// last slot (an integer completion counter; no float sum depends on the order of arrival),
// out[r, d] = sum_k weights[r, k] * slots[r*K + k, d] (+ sigmoid(gate_r) * slots[n_rows*K + r, d]): the bits
// of moe_combine.
void affine_wx_grouped_combine(const AffineWeight& w, const ExpertRow* pairs, int n_pairs,
                               const Activations& x, int n_x_rows, float* slots, int64_t ld_slots,
                               const MoeCombineArgs& combine, cudaStream_t stream);

// Expert windows: the rows of a decode step that one expert serves, read against its weights once. Window i
// covers y rows first .. first+count-1 (count 0..kMaxExpertWindowRows; 0: an unused slot, skipped); y row
// first+j is expert `expert` applied to x row row_ids[first+j] (or to x row first+j when row_ids is null: the
// down projection reads the gate|up results in slot order). Each result equals affine_wx of that expert on
// that row alone, bit for bit, whatever the window's size (the tiers of affine_wx).
constexpr int kMaxExpertWindowRows = 4;
struct ExpertWindow {
  int32_t expert;
  int32_t first;
  int32_t count;
};

// One launch for all windows (`windows`, `row_ids` in device memory). A window whose expert, count or rows
// are out of range (checked on the device) yields NaN outputs.
void affine_wx_expert_windows(const AffineWeight& w, const ExpertWindow* windows, int n_windows,
                              const int32_t* row_ids, const Activations& x, int n_x_rows, float* y,
                              int64_t ldy, cudaStream_t stream);

// Groups a step's routing (topk [n_rows, k] expert ids in device memory) into expert windows, in one launch:
// experts in ascending order, each expert's (row, rank) pairs in ascending row order, cut into windows of at
// most kMaxExpertWindowRows. Writes windows [n_rows*k] (unused slots count 0), row_ids [n_rows*k] (x row of
// each slot) and slot_of [n_rows*k] (the slot of pair (row, rank), for the weighted combine). n_experts <=
// 1024, n_rows*k <= 4096. An id out of range is left out (its slot_of is -1).
void moe_expert_windows(const int32_t* topk, int n_rows, int k, int n_experts, ExpertWindow* windows,
                        int32_t* row_ids, int32_t* slot_of, cudaStream_t stream);

// The hyper-connection mix's tail for ONE row, in one launch (docs/cuda-model.md): low = silu(joint[0..R) *
// inv_s), mix = up low (up [4 D, R]; each output's chain that of affine_wx), x[d] = (sum_k sigmoid(mix[k D +
// d]) * normed[k D + d]) * (1/4) with k in order, and with iota set iota[k] = 2 sigmoid(joint[R + k] * inv_s)
// for k < 4: the bits of hc_activations, affine_wx and hc_combine run apart. False, with nothing enqueued,
// where it does not apply (not 4 streams of D % 4 == 0 values, R % 8 != 0 or R > 1024, or a weight that
// affine_wx splits into column slices).
bool affine_wx_hc_tail(const AffineWeight& up, const float* joint, int R, float inv_s, const float* normed,
                       int D, float* x, float* iota, cudaStream_t stream);

}  // namespace ds::cuda
