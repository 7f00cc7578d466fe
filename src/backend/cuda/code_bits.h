#pragma once
// The code widths the affine product kernels are instantiated for: fn(std::integral_constant<int, B>{}) with
// B = 2, 3, 4, 5, 6, or 8 for any other value (callers validate bits first).
#include <type_traits>

namespace ds::cuda {

template <class Fn>
void with_bits(int bits, Fn&& fn) {
  switch (bits) {
    case 2:
      fn(std::integral_constant<int, 2>{});
      break;
    case 3:
      fn(std::integral_constant<int, 3>{});
      break;
    case 4:
      fn(std::integral_constant<int, 4>{});
      break;
    case 5:
      fn(std::integral_constant<int, 5>{});
      break;
    case 6:
      fn(std::integral_constant<int, 6>{});
      break;
    default:
      fn(std::integral_constant<int, 8>{});
      break;
  }
}

}  // namespace ds::cuda
