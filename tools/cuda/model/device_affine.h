#pragma once
// A host MLX affine weight (tools/cuda/host_reference.h) as the device products take it, and the vector
// copies the hc checks use (hc_checks.cpp, hc_tensor_checks.cpp).
#include <vector>

#include "../checks.h"
#include "../host_reference.h"
#include "backend/cuda/device_buffer.h"
#include "backend/cuda/tc_products.h"
#include "backend/cuda/wx_products.h"

namespace ds::cuda::modelcheck {

using wxcheck::download;
using wxcheck::upload;

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
