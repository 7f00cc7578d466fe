#pragma once
// `deltaserve convert`: an HF bf16/f32 checkpoint directory -> an MLX affine checkpoint directory (mlx-lm
// names for text configs, mlx-vlm names for multimodal ones; see docs/convert.md), with config
// `quantization`, the tokenizer and generation files copied, and a report of every linear weight's
// quantization error.
#include <filesystem>

#include "convert/convert_plan.h"
#include "convert/convert_report.h"

namespace ds {

// Throws ds::Error naming the file, tensor, option or override at fault: missing or unreadable input, an
// unsupported global width, an override that matches nothing or does not fit its tensor, or a non-empty
// output directory (unless options.force). The output is a function of the input and the options alone.
ConvertReport convert_checkpoint(const std::filesystem::path& in, const std::filesystem::path& out,
                                 const ConvertOptions& options);

}  // namespace ds
