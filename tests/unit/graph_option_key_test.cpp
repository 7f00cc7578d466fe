// The option part of a parked CUDA graph's key (src/backend/cuda/model/graph_option_key.h): every option and
// process-wide kernel switch reaches the key, each in its own slot, so a graph captured under one setting is
// never replayed under another. Plain C++: the header needs no CUDA.
#include "backend/cuda/model/graph_option_key.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace ds::cuda {
namespace {

std::vector<int64_t> key_of(const GraphOptionKey& o) {
  std::vector<int64_t> key{7, 8};  // a shape part before it, as CudaModel's keys have
  append_graph_option_key(key, o);
  return key;
}

TEST(GraphOptionKey, EveryOptionAndSwitchChangesTheKey) {
  using Change = std::pair<std::string, std::function<void(GraphOptionKey&)>>;
  const std::vector<Change> changes = {
      {"time_ops", [](GraphOptionKey& o) { o.time_ops = true; }},
      {"expert_windows", [](GraphOptionKey& o) { o.expert_windows = true; }},
      {"programmatic_launch", [](GraphOptionKey& o) { o.programmatic_launch = true; }},
      {"fused_hc", [](GraphOptionKey& o) { o.fused_hc = true; }},
      {"hc_head_outputs", [](GraphOptionKey& o) { o.hc_head_outputs = 2; }},
      {"fused_route", [](GraphOptionKey& o) { o.fused_route = true; }},
      {"fused_swiglu", [](GraphOptionKey& o) { o.fused_swiglu = true; }},
      {"fused_combine", [](GraphOptionKey& o) { o.fused_combine = true; }},
      {"decode_products", [](GraphOptionKey& o) { o.decode_products = 1; }},
      {"tensor_min_rows", [](GraphOptionKey& o) { o.tensor_min_rows = 1024; }},
      {"tensor_min_cols", [](GraphOptionKey& o) { o.tensor_min_cols = 512; }},
      {"tensor_tall_only", [](GraphOptionKey& o) { o.tensor_tall_only = true; }},
      {"generic_mixers", [](GraphOptionKey& o) { o.generic_mixers = true; }},
      {"prompt_chunked_deltanet", [](GraphOptionKey& o) { o.prompt_chunked_deltanet = true; }},
      {"prompt_staged_deltanet", [](GraphOptionKey& o) { o.prompt_staged_deltanet = true; }},
      {"prompt_selected_tiles", [](GraphOptionKey& o) { o.prompt_selected_tiles = true; }},
      {"split_argmax", [](GraphOptionKey& o) { o.split_argmax = true; }},
      {"row_kernel", [](GraphOptionKey& o) { o.row_kernel = 2; }},
      {"paired_min_tasks", [](GraphOptionKey& o) { o.paired_min_tasks = 96; }},
      {"paired_grouped", [](GraphOptionKey& o) { o.paired_grouped = true; }},
      {"tc_planes", [](GraphOptionKey& o) { o.tc_planes = 1; }},
      {"tc_small_windows", [](GraphOptionKey& o) { o.tc_small_windows = true; }},
      {"tc_one_row_in_block", [](GraphOptionKey& o) { o.tc_one_row_in_block = true; }},
      {"tc_forced_slices", [](GraphOptionKey& o) { o.tc_forced_slices = 4; }},
      {"tc_row_kernel", [](GraphOptionKey& o) { o.tc_row_kernel = true; }},
      {"tc_row_variant", [](GraphOptionKey& o) { o.tc_row_variant = 2; }},
      {"tc_swiglu", [](GraphOptionKey& o) { o.tc_swiglu = true; }},
      {"tc_group", [](GraphOptionKey& o) { o.tc_group = true; }},
      {"tc_expert_routed", [](GraphOptionKey& o) { o.tc_expert_routed = 7; }},
      {"hc_tensor", [](GraphOptionKey& o) { o.hc_tensor = true; }},
      {"deltanet_one_launch", [](GraphOptionKey& o) { o.deltanet_one_launch = true; }},
      {"down_pairs_early", [](GraphOptionKey& o) { o.down_pairs_early = true; }},
      {"loads_first", [](GraphOptionKey& o) { o.loads_first = true; }},
      {"row_loads_first", [](GraphOptionKey& o) { o.row_loads_first = true; }},
      {"hc_tail_variant", [](GraphOptionKey& o) { o.hc_tail_variant = 1; }},
      {"tiled_outputs", [](GraphOptionKey& o) { o.tiled_outputs = 64; }},
      {"tiled_min_blocks", [](GraphOptionKey& o) { o.tiled_min_blocks = 3; }},
      {"tiled_ring", [](GraphOptionKey& o) { o.tiled_ring = 3; }},
      {"attend_warps", [](GraphOptionKey& o) { o.attend_warps = 16; }},
      {"route_fast", [](GraphOptionKey& o) { o.route_fast = true; }},
  };
  const GraphOptionKey base;
  const std::vector<int64_t> base_key = key_of(base);
  EXPECT_EQ(base_key.size(), 2 + changes.size()) << "one slot per field, each listed above";
  std::set<std::vector<int64_t>> keys{base_key};
  for (const auto& [name, change] : changes) {
    GraphOptionKey o;
    change(o);
    const std::vector<int64_t> k = key_of(o);
    EXPECT_NE(k, base_key) << name << " does not reach the graph key";
    EXPECT_TRUE(keys.insert(k).second) << name << " shares its key with another setting";
    EXPECT_EQ(std::vector<int64_t>(k.begin(), k.begin() + 2), (std::vector<int64_t>{7, 8}))
        << "the shape part stays first";
  }
}

}  // namespace
}  // namespace ds::cuda
