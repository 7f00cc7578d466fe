#pragma once
// The one-row kernels' stage copy (tc_row.cu's row_kernel, tc_row_par.cu's row_par_kernel): each lane's
// cp.async chunks of a stage of a warp's 16 outputs, offsets computed once a warp (tcrow10, tc11, tcmid12).
#include <cstdint>

#include "backend/cuda/tc_decode_parts.cuh"

namespace ds::cuda::tcd {

template <int Bits>
struct RowCopy {
  static constexpr int kChunks = (kWarpOutputs * Bits + 31) / 32;  // 16-byte code chunks a lane, full stage
  // Lane chunk i is chunk c = lane + 32 i of the stage: row c / Bits, 16-byte chunk c % Bits of the row's
  // stage (a tail stage copies those under its count), when c < 16 Bits.
  const uint32_t* src[kChunks];  // the chunk's source at stage 0 of the current task
  const uint32_t* sb;            // scales (lanes 0-15) or biases (16-31) as words
  int64_t sb_row;                // bf16 index of the lane's row's first scale
  const uint32_t* sb_word;       // the word holding it
  int sb_par;                    // its half of that word
  int lane;
  uint32_t dst_off[kChunks];  // kLean2: chunk i's byte offset in a stage
  uint32_t sb_dst_off;        // and the lane's scale or bias words'

  __device__ __forceinline__ RowCopy(const DecodeWeight& W, int64_t o0, int lane_) : lane(lane_) {
    sb = lane < 16 ? W.scales : W.biases;
    retarget(W, o0);
    using L = Stage<Bits>;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = lane + 32 * i;
      dst_off[i] = 4u * static_cast<uint32_t>(row_of(c) * L::kRowWords + 4 * chunk_of(c));
    }
    sb_dst_off = 4u * static_cast<uint32_t>((lane & 15) * L::kRowWords + L::kCodeWords + 4 * (lane >> 4));
  }
  __device__ __forceinline__ static int row_of(int c) {
    return c / Bits;
  }
  __device__ __forceinline__ static int chunk_of(int c) {
    return c - row_of(c) * Bits;
  }
  // The warp's 16 outputs from o0 (rows past the matrix clamped to its last, as issue_stage).
  __device__ __forceinline__ void retarget(const DecodeWeight& W, int64_t o0) {
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = lane + 32 * i;
      const int64_t o = min(o0 + row_of(c), W.rows - 1);
      src[i] = W.codes + (c < kWarpOutputs * Bits ? o * W.words_per_row + 4 * chunk_of(c) : 0);
    }
    sb_row = W.sb_base + min(o0 + (lane & 15), W.rows - 1) * W.groups_per_row;
    sb_word = sb + (sb_row >> 1), sb_par = static_cast<int>(sb_row & 1);
  }

  // The stage's code chunks (units t0 .. t0 + nu - 1 of each row) into dst_stage; I is the offsets' type
  // (int for the lean copy, int64_t for the plain one), so each form keeps its own address arithmetic.
  template <typename I>
  __device__ __forceinline__ void copy_codes(uint32_t* dst_stage, I t0, int nu) const {
    using L = Stage<Bits>;
    const int lim = nu * Bits / 4;  // 16-byte chunks a row in this stage (rows are whole chunks)
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int c = lane + 32 * i, k = chunk_of(c);
      if (c < kWarpOutputs * Bits && k < lim)
        cp_async16(dst_stage + row_of(c) * L::kRowWords + 4 * k, src[i] + t0 * Bits, 16);
    }
  }

  // Stage s (units 4s .. 4s + nu - 1) of the current task into dst, or nothing when `live` is false; one
  // commit group per call, as issue_stage. Lean (launch variant bit 2): the same bytes to the same places
  // with fewer instructions: 32-bit stage offsets (T <= 256) and the stage's 1-3 words of scales or biases
  // as three predicated copies from the row's first word (sb_word, sb_par) instead of a 64-bit loop.
  template <bool Lean>
  __device__ __forceinline__ void issue(const DecodeWeight& W, bool live, int64_t s, int64_t T,
                                        uint32_t* dst_stage) const {
    using L = Stage<Bits>;
    uint32_t* sb_dst = dst_stage + (lane & 15) * L::kRowWords + L::kCodeWords + 4 * (lane >> 4);
    if (Lean && live) {
      const int t0 = static_cast<int>(s) * kUnitsPerStage;
      const int nu = min(kUnitsPerStage, static_cast<int>(T) - t0);
      copy_codes(dst_stage, t0, nu);
      // Words (sb_row + g) >> 1 for the stage's groups g_lo .. g_hi: at most 4 groups, so at most 3 words.
      const int g_lo = (t0 * 32) >> W.group_shift, g_hi = ((t0 + nu) * 32 - 1) >> W.group_shift;
      const int w_lo = (sb_par + g_lo) >> 1, w_hi = (sb_par + g_hi) >> 1;
#pragma unroll
      for (int k = 0; k < 3; ++k)
        if (w_lo + k <= w_hi) cp_async4(sb_dst + k, sb_word + w_lo + k, 4);
    } else if (live) {
      const int64_t t0 = s * kUnitsPerStage;
      const int nu = static_cast<int>(min(int64_t{kUnitsPerStage}, T - t0));
      copy_codes(dst_stage, t0, nu);
      const int64_t i_lo = sb_row + ((t0 * 32) >> W.group_shift);
      const int64_t i_hi = sb_row + (((t0 + nu) * 32 - 1) >> W.group_shift);
      for (int64_t w = i_lo >> 1; w <= (i_hi >> 1); ++w) cp_async4(sb_dst + (w - (i_lo >> 1)), sb + w, 4);
    }
    cp_async_commit();
  }

  // Lean2 (launch variant bit 4): the lean copy's bytes to the same places, addressed as 32-bit shared
  // offsets from the slot's base (no generic-to-shared conversion a copy) and 32-bit stage counters.
  __device__ __forceinline__ void issue2(const DecodeWeight& W, bool live, int s, int T, uint32_t dst) const {
    using L = Stage<Bits>;
    if (live) {
      const int t0 = s * kUnitsPerStage, nu = min(kUnitsPerStage, T - t0), lim = nu * Bits / 4;
      constexpr bool kWhole = kWarpOutputs * Bits % 32 == 0;  // every lane's every chunk in the stage
      if (nu == kUnitsPerStage) {                             // every chunk of a row (k < Bits)
#pragma unroll
        for (int i = 0; i < kChunks; ++i)
          if (kWhole || lane + 32 * i < kWarpOutputs * Bits) cp16(dst + dst_off[i], src[i] + t0 * Bits);
      } else {
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
          const int c = lane + 32 * i;
          if (c < kWarpOutputs * Bits && chunk_of(c) < lim) cp16(dst + dst_off[i], src[i] + t0 * Bits);
        }
      }
      const int g_lo = (t0 * 32) >> W.group_shift, g_hi = ((t0 + nu) * 32 - 1) >> W.group_shift;
      const int w_lo = (sb_par + g_lo) >> 1, w_hi = (sb_par + g_hi) >> 1;
      const uint32_t sb_dst = dst + sb_dst_off;
#pragma unroll
      for (int k = 0; k < 3; ++k)
        if (w_lo + k <= w_hi) cp4(sb_dst + 4 * k, sb_word + w_lo + k);
    }
    cp_async_commit();
  }
  __device__ __forceinline__ static void cp16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
  }
  __device__ __forceinline__ static void cp4(uint32_t dst, const void* src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(dst), "l"(src) : "memory");
  }
};

}  // namespace ds::cuda::tcd
