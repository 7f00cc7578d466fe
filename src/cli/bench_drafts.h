#pragma once
// `deltaserve bench` speculative line: one greedy reply to a repetitive prompt through the engine with drafts
// off and on: decode tokens/s, drafted and accepted counts, and whether the tokens are the same.
#include <cstdint>
#include <nlohmann/json.hpp>

#include "model/model.h"

namespace ds::cli {

nlohmann::json bench_drafts(const Model& model, int reply_tokens, uint64_t seed);
void print_drafts(const nlohmann::json& result);

}  // namespace ds::cli
