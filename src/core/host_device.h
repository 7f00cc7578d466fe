#pragma once
// DS_HOST_DEVICE marks header-only math that the CUDA sampler also runs on the device (nvcc, -fmad=false):
// the same IEEE operations in the same order, so the same bits on both sides. Plain C++ compilers see
// nothing.
#if defined(__CUDACC__)
#define DS_HOST_DEVICE __host__ __device__
#else
#define DS_HOST_DEVICE
#endif
