#pragma once
// The part of a parked graph's key (graph_cache.h) that is not the call's shape or buffers: every model
// option and process-wide kernel switch that changes which kernels a captured graph holds or what they
// compute. A switch left out would let a call replay a graph captured under the switch's other value (the
// bench's and checks' before/after flip them on a live model). Plain C++ (no CUDA), so a CPU test checks each
// field reaches the key.
#include <cstdint>
#include <vector>

namespace ds::cuda {

struct GraphOptionKey {
  // CudaModelOptions.
  bool time_ops = false;
  bool expert_windows = false;
  bool programmatic_launch = false;
  bool fused_hc = false;
  int64_t hc_head_outputs = 0;
  bool fused_route = false, fused_swiglu = false, fused_combine = false;
  int64_t decode_products = 0;  // a DecodeProducts
  int64_t tensor_min_rows = 0, tensor_min_cols = 0;
  bool tensor_tall_only = false;
  bool generic_mixers = false;
  // Prompt passes launch directly today (never captured); keyed so that a captured one could not replay a
  // stale kernel choice either.
  bool prompt_chunked_deltanet = false, prompt_staged_deltanet = false, prompt_selected_tiles = false;
  bool split_argmax = false;
  // Process-wide switches: the FMA products' one-row kernel and paired grouping (wx_row_choice.h), the decode
  // tensor products' plane layout (DS_CUDA_TC_PLANES), small-window and in-block one-row kernels and forced
  // column slices (tc_decode.h), the tiled products' tile config (DS_CUDA_TILED_OUTPUTS, tc_products.h).
  int64_t row_kernel = 0;  // a RowKernel
  int64_t paired_min_tasks = 0;
  bool paired_grouped = false;
  int64_t tc_planes = 0;  // a TcPlanes
  bool tc_small_windows = false, tc_one_row_in_block = false;
  int64_t tc_forced_slices = 0;
  bool tc_row_kernel = false;  // the one-row tensor kernel (tc_row.cu) and its launch variant
  int64_t tc_row_variant = 0;
  bool tc_swiglu = false;        // the tensor expert tiles' SwiGLU fold (tc_decode_fold_swiglu)
  bool tc_group = false;         // and their grouping fold at one row (tc_decode_fold_grouping)
  int64_t tc_expert_routed = 0;  // the routed expert forms at one row (tc_decode_expert_routed, a mask)
  bool hc_tensor = false;        // the tensor family's fused hc tail (hc_tensor_tail_on, DS_CUDA_HC_TENSOR)
  int64_t hc_tail_variant = 0;   // and its kernel (hc_tensor_tail_variant, DS_CUDA_HC_TAIL_VARIANT)
  bool deltanet_one_launch = false;  // CudaModel::deltanet_one_launch (DS_CUDA_DN_ONE_LAUNCH)
  bool down_pairs_early = false;     // CudaModel::down_pairs_early (DS_CUDA_DOWN_PAIRS_EARLY)
  bool loads_first = false;          // CudaModel::loads_first (DS_CUDA_LOADS_FIRST)
  bool row_loads_first = false;      // the paired-staged products' grouped staging (row_loads_first)
  int64_t tiled_outputs = 0, tiled_min_blocks = 0;
  int64_t tiled_ring = 0;  // which tiles take the ring kernel (tc_products_ring.h)
  int64_t attend_warps = 0;  // the split-KV attend kernel's warps (attention_attend_warps, DS_CUDA_ATTEND_WARPS)
  bool route_fast = false;   // the routings' top k by redux (moe_route_fast, DS_CUDA_ROUTE_FAST)
};

// Appends every field of `o` to `key`, each in its own slot (no packing that two settings could share).
inline void append_graph_option_key(std::vector<int64_t>& key, const GraphOptionKey& o) {
  auto b = [](bool v) -> int64_t { return v ? 1 : 0; };
  key.insert(key.end(), {b(o.time_ops),
                         b(o.expert_windows),
                         b(o.programmatic_launch),
                         b(o.fused_hc),
                         o.hc_head_outputs,
                         b(o.fused_route),
                         b(o.fused_swiglu),
                         b(o.fused_combine),
                         o.decode_products,
                         o.tensor_min_rows,
                         o.tensor_min_cols,
                         b(o.tensor_tall_only),
                         b(o.generic_mixers),
                         b(o.prompt_chunked_deltanet),
                         b(o.prompt_staged_deltanet),
                         b(o.prompt_selected_tiles),
                         b(o.split_argmax),
                         o.row_kernel,
                         o.paired_min_tasks,
                         b(o.paired_grouped),
                         o.tc_planes,
                         b(o.tc_small_windows),
                         b(o.tc_one_row_in_block),
                         o.tc_forced_slices,
                         b(o.tc_row_kernel),
                         o.tc_row_variant,
                         b(o.tc_swiglu),
                         b(o.tc_group),
                         o.tc_expert_routed,
                         b(o.hc_tensor),
                         b(o.deltanet_one_launch),
                         b(o.down_pairs_early),
                         b(o.loads_first),
                         b(o.row_loads_first),
                         o.hc_tail_variant,
                         o.tiled_outputs,
                         o.tiled_min_blocks,
                         o.tiled_ring,
                         o.attend_warps,
                         b(o.route_fast)});
}

}  // namespace ds::cuda
