#pragma once
// Which kernel runs the prompt tiles of affine weights at output tiles of 128 (TiledConfig 128/2, the
// default; experts10): 2 (default) the ring kernel (tc_products_ring.cu: codes, scales and x through a ring
// of cp.async stages three tiles ahead; no MMAs on a warp's fragments past the tile's rows) with 4-bit codes
// made bf16 by LOP3 and one bf16x2 FMA, 1 the ring kernel with the register-staged kernel's conversions, 0
// the register-staged kernel (tc_products.cu). Every choice gives the same bits (checked). Process-wide, for
// measuring: DS_CUDA_TILED_RING=0|1|2 sets it at first use, set_tiled_ring before launching.
namespace ds::cuda {

int tiled_ring();
void set_tiled_ring(int ring);  // 0, 1 or 2, else ArgumentError

}  // namespace ds::cuda
