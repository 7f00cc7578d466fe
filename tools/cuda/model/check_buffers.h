#pragma once
// The device buffers the model checks share: vector copies, a download after the whole device is idle, a
// bitwise comparison, and a host MLX affine weight (tools/cuda/host_reference.h) as the products take it.
#include <cstring>
#include <vector>

#include "../checks.h"
#include "../host_reference.h"
#include "backend/cuda/cuda_error.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/tc_products.h"
#include "backend/cuda/wx_products.h"

namespace ds::cuda::modelcheck {

using wxcheck::download;
using wxcheck::upload;

// The first n elements of b once every stream of the device is idle (the checks launch on the legacy stream
// and on the model's).
template <class T>
std::vector<T> synced_download(const DeviceBuffer& b, size_t n) {
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  return download<T>(b, n);
}

template <class T>
bool same_bytes(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

struct DeviceAffine {
  DeviceBuffer codes, scales, biases;
  AffineWeight w;
  explicit DeviceAffine(const wxcheck::HostAffine& a)
      : codes(upload(a.codes)), scales(upload(a.scales)), biases(upload(a.biases)) {
    w = {codes.as<uint32_t>(),
         scales.as<uint16_t>(),
         biases.as<uint16_t>(),
         a.rows,
         a.cols,
         a.bits,
         a.group,
         1};
  }
  // The same weight as the tensor products' view (one expert).
  TiledWeight tiled() const {
    TiledWeight t;
    t.affine = w, t.rows = w.rows, t.cols = w.cols;
    return t;
  }
};

}  // namespace ds::cuda::modelcheck
