#pragma once
// Which kernel runs the prompt tiles of affine weights at output tiles of 128 (TiledConfig 128/2, the
// default; experts10): the register-staged kernel (tc_products.cu: a tile's codes loaded into registers one
// tile ahead) or the ring kernel (tc_products_ring.cu: codes, scales and x through a ring of cp.async stages
// three tiles ahead, 4-bit codes made bf16 by LOP3 and one bf16x2 FMA, no MMAs on a warp's fragments past the
// tile's rows). 3 (default): the ring kernel for the expert tiles (tiled_wx_experts), the register-staged
// one for single matrices (tiled_wx, tiled_wx_split_k), by docs/receipts/cuda-prompt-experts.md: the ring ran
// 1.1-1.25x on expert tiles of 16 and 32 rows, 0.96x (gate|up) and 1.04-1.08x (down) on tiles of 64 rows,
// 0.93-0.95x on the dense products; 2: the ring everywhere; 1: the ring everywhere
// with the register-staged kernel's conversions for the codes; 0: the register-staged kernel everywhere.
// Every choice gives the same bits (checked). Process-wide, for measuring: DS_CUDA_TILED_RING=0|1|2|3 at
// first use, set_tiled_ring.
namespace ds::cuda {

int tiled_ring();
void set_tiled_ring(int ring);  // 0..3, else ArgumentError

}  // namespace ds::cuda
