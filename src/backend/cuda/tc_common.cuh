#pragma once
// Device helpers shared by the tensor-core products (tc_products.cu for prompts, tc_decode.cu for decode):
// the exact three-term bf16 split of fp32 activations, the 32-column tile sum in its fixed order, the
// m16n8k16 bf16 MMA and the cp.async copies.
#include <cuda_bf16.h>

#include <cstdint>

namespace ds::cuda::tc {

constexpr int kTerms = 3;  // x = x0 + x1 + x2 exactly, each a bf16

__device__ __forceinline__ uint16_t to_bf16(float v) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ __forceinline__ float from_bf16(uint16_t v) {
  return __uint_as_float(uint32_t{v} << 16);
}

// v = t0 + t1 + t2 exactly (each residual is exact in fp32; three 8-bit terms cover the 24-bit significand).
__device__ __forceinline__ void split3(float v, uint16_t (&t)[kTerms]) {
  t[0] = to_bf16(v);
  const float r1 = __fsub_rn(v, from_bf16(t[0]));
  t[1] = to_bf16(r1);
  t[2] = to_bf16(__fsub_rn(r1, from_bf16(t[1])));
}

// Eight consecutive values split (split3) into their kTerms planes, each plane's 8 bf16 as one uint4 in the
// MMA fragment's column order: values e and e + 4 share a 32-bit word (e low).
__device__ __forceinline__ void split3_planes(const float (&v)[8], uint4 (&plane)[kTerms]) {
  uint16_t parts[8][kTerms];
#pragma unroll
  for (int e = 0; e < 8; ++e) split3(v[e], parts[e]);
#pragma unroll
  for (int j = 0; j < kTerms; ++j) {
    auto pack = [&](int a, int c) { return uint32_t{parts[a][j]} | (uint32_t{parts[c][j]} << 16); };
    plane[j] = make_uint4(pack(0, 4), pack(1, 5), pack(2, 6), pack(3, 7));
  }
}

// The sum of a 32-column tile in the order both paths use: (a + b) + (c + d) per 4 columns (q[c]), then a
// balanced tree over the 8 groups.
__device__ __forceinline__ float sum4(float a, float b, float c, float d) {
  return __fadd_rn(__fadd_rn(a, b), __fadd_rn(c, d));
}
__device__ __forceinline__ float tree8(const float (&q)[8]) {
  return __fadd_rn(sum4(q[0], q[1], q[2], q[3]), sum4(q[4], q[5], q[6], q[7]));
}

// d += a * b, m16n8k16, bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = a * b (the accumulator starts at +0: the same MMA as mma_bf16 on zeroed d, without zeroing it first).
__device__ __forceinline__ void mma_bf16_zero(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                              uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%10,%10,%10,%10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

// The shared-memory address of p (for ldmatrix_x4: a base plus constant offsets folds into the instruction).
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 b16 matrices from shared memory: lanes 8i..8i+7 give the row addresses of matrix i (16-byte
// aligned); lane l gets row l/4, elements 2(l%4) and 2(l%4)+1 of each matrix (the mma fragment layout).
__device__ __forceinline__ void ldmatrix_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2,
                                            uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr)
               : "memory");
}

// Asynchronous global -> shared copies; src_bytes 0 writes zeros.
__device__ __forceinline__ void cp_async16(void* dst, const void* src, int src_bytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async4(void* dst, const void* src, int src_bytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;" ::: "memory");
}
// Waits until at most N of this thread's copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

}  // namespace ds::cuda::tc
