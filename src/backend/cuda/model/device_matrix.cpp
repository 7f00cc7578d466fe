#include "backend/cuda/model/device_matrix.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cuda/model/glue_kernels.h"
#include "core/error.h"

namespace ds::cuda {

namespace {

size_t align16(size_t n) {
  return (n + 15) / 16 * 16;
}

}  // namespace

bool fast_affine(const MatrixWeight& w) {
  const bool bits_ok = w.bits == 2 || w.bits == 3 || w.bits == 4 || w.bits == 5 || w.bits == 6 || w.bits == 8;
  const bool group_ok = w.group == 32 || w.group == 64 || w.group == 128;
  return w.encoding == MatrixEncoding::Affine && w.scale_dtype == DType::BF16 && bits_ok && group_ok;
}

namespace {

// The parts' rows one after another as one matrix (rows = the sum, one expert): the layout of a stack of
// experts, of gate|up joined, and of a joint matrix alike. The parts share cols and encoding.
DeviceMatrix upload_rows(const std::vector<const MatrixWeight*>& parts) {
  const MatrixWeight& w0 = *parts[0];
  DeviceMatrix m;
  m.cols = w0.cols;
  for (const MatrixWeight* p : parts) m.rows += p->rows;
  if (fast_affine(w0)) {
    m.kind = DeviceMatrix::Kind::Affine;
    const size_t code_bytes = static_cast<size_t>(m.rows * w0.row_bytes());
    const size_t scale_bytes = static_cast<size_t>(m.rows * (w0.cols / w0.group)) * 2;
    const size_t codes_total = align16(code_bytes), scales_total = align16(scale_bytes);
    m.storage = DeviceBuffer(codes_total + 2 * scales_total);
    auto* base = m.storage.as<uint8_t>();
    size_t at_codes = 0, at_scales = 0;
    for (const MatrixWeight* p : parts) {
      const size_t c = static_cast<size_t>(p->rows * p->row_bytes());
      const size_t sc = static_cast<size_t>(p->rows * (p->cols / p->group)) * 2;
      check(cudaMemcpy(base + at_codes, p->data, c, cudaMemcpyHostToDevice), "upload codes");
      check(cudaMemcpy(base + codes_total + at_scales, p->scales, sc, cudaMemcpyHostToDevice),
            "upload scales");
      check(cudaMemcpy(base + codes_total + scales_total + at_scales, p->biases, sc, cudaMemcpyHostToDevice),
            "upload biases");
      at_codes += c, at_scales += sc;
    }
    m.affine = AffineWeight{reinterpret_cast<const uint32_t*>(base),
                            reinterpret_cast<const uint16_t*>(base + codes_total),
                            reinterpret_cast<const uint16_t*>(base + codes_total + scales_total),
                            m.rows,
                            m.cols,
                            w0.bits,
                            w0.group,
                            1};
    return m;
  }
  if (w0.encoding == MatrixEncoding::BF16 || w0.encoding == MatrixEncoding::F32) {
    m.kind = w0.encoding == MatrixEncoding::BF16 ? DeviceMatrix::Kind::Bf16 : DeviceMatrix::Kind::F32;
    m.storage = DeviceBuffer(static_cast<size_t>(m.rows * w0.row_bytes()));
    size_t at = 0;
    for (const MatrixWeight* p : parts) {
      const size_t bytes = static_cast<size_t>(p->rows * p->row_bytes());
      check(cudaMemcpy(m.storage.as<uint8_t>() + at, p->data, bytes, cudaMemcpyHostToDevice), "upload dense");
      at += bytes;
    }
    m.dense = m.storage.data();
    return m;
  }
  // f16, or affine the fast kernel does not take: dequantized to f32 by the reference (exact values).
  m.kind = DeviceMatrix::Kind::F32;
  m.storage = DeviceBuffer(static_cast<size_t>(m.rows * m.cols) * 4);
  int64_t row0 = 0;
  for (const MatrixWeight* p : parts) {
    std::vector<float> rows(static_cast<size_t>(p->rows * p->cols));
    for (int64_t r = 0; r < p->rows; ++r) dequantize_row_reference(*p, r, rows.data() + r * p->cols);
    check(cudaMemcpy(m.storage.as<float>() + row0 * m.cols, rows.data(), rows.size() * 4,
                     cudaMemcpyHostToDevice),
          "upload dequantized");
    row0 += p->rows;
  }
  m.dense = m.storage.data();
  return m;
}

// A stack of `experts` matrices of `rows` rows each, from the parts' rows in order.
DeviceMatrix as_stack(DeviceMatrix m, int64_t rows, int64_t experts) {
  m.rows = rows;
  m.n_experts = experts;
  if (m.kind == DeviceMatrix::Kind::Affine) m.affine.rows = rows, m.affine.n_experts = experts;
  return m;
}

}  // namespace

bool same_encoding(const MatrixWeight& a, const MatrixWeight& b) {
  return a.cols == b.cols && a.encoding == b.encoding && a.bits == b.bits && a.group == b.group &&
         a.scale_dtype == b.scale_dtype;
}

DeviceMatrix upload_matrix(const std::vector<const MatrixWeight*>& parts) {
  if (parts.empty() || parts[0] == nullptr || !parts[0]->valid()) fail("upload_matrix: no matrix to upload");
  const MatrixWeight& w0 = *parts[0];
  for (const MatrixWeight* p : parts)
    if (p->rows != w0.rows || !same_encoding(*p, w0))
      fail("upload_matrix: '{}' differs in shape or encoding from '{}', so they cannot be stacked", p->name,
           w0.name);
  return as_stack(upload_rows(parts), w0.rows, static_cast<int64_t>(parts.size()));
}

bool upload_joined(const std::vector<const MatrixWeight*>& gate, const std::vector<const MatrixWeight*>& up,
                   DeviceMatrix& m) {
  if (gate.empty() || gate.size() != up.size())
    fail("upload_joined: {} gate and {} up matrices", gate.size(), up.size());
  std::vector<const MatrixWeight*> parts;
  for (size_t e = 0; e < gate.size(); ++e) {
    if (gate[e] == nullptr || up[e] == nullptr || !gate[e]->valid() || !up[e]->valid())
      fail("upload_joined: a gate or up matrix is missing");
    parts.push_back(gate[e]);
    parts.push_back(up[e]);
  }
  const MatrixWeight& w0 = *parts[0];
  for (const MatrixWeight* p : parts)
    if (p->rows != w0.rows || !same_encoding(*p, w0)) return false;
  m = as_stack(upload_rows(parts), 2 * w0.rows, static_cast<int64_t>(gate.size()));
  return true;
}

JointMatrix upload_joint(const std::vector<const MatrixWeight*>& parts, bool join) {
  JointMatrix j;
  bool same = join;
  for (const MatrixWeight* p : parts) {
    if (p == nullptr || !p->valid()) fail("upload_joint: a part is missing");
    same = same && same_encoding(*p, *parts[0]);
    j.offset.push_back(j.width);
    j.width += p->rows;
  }
  if (same) {
    j.joined = upload_rows(parts);
  } else {
    for (const MatrixWeight* p : parts) j.parts.push_back(upload_matrix({p}));
  }
  return j;
}

JointMatrix random_joint(const std::vector<int64_t>& rows, int64_t cols, bool join, int bits, int group,
                         uint64_t seed, cudaStream_t stream) {
  JointMatrix j;
  for (int64_t r : rows) {
    j.offset.push_back(j.width);
    j.width += r;
    if (!join) j.parts.push_back(random_matrix(r, cols, 1, bits, group, seed++, stream));
  }
  if (join) j.joined = random_matrix(j.width, cols, 1, bits, group, seed, stream);
  return j;
}

size_t JointMatrix::bytes() const {
  size_t n = joined.storage.bytes();
  for (const DeviceMatrix& p : parts) n += p.storage.bytes();
  return n;
}

DeviceMatrix random_matrix(int64_t rows, int64_t cols, int64_t n_experts, int bits, int group, uint64_t seed,
                           cudaStream_t stream) {
  DeviceMatrix m;
  m.rows = rows;
  m.cols = cols;
  m.n_experts = n_experts;
  if (bits == 0) {
    m.kind = DeviceMatrix::Kind::Bf16;
    m.storage = DeviceBuffer(static_cast<size_t>(rows * cols * n_experts) * 2);
    const float a = 1.0f / std::sqrt(static_cast<float>(cols));
    fill_random_bf16(m.storage.as<uint16_t>(), rows * cols * n_experts, seed, -a, a, stream);
    m.dense = m.storage.data();
    return m;
  }
  if (cols % group != 0 || (cols * bits) % 32 != 0)
    fail("random_matrix: cols {} must be a multiple of the group {} (and of 32 codes)", cols, group);
  m.kind = DeviceMatrix::Kind::Affine;
  const int64_t words = rows * cols * bits / 32 * n_experts, groups = rows * (cols / group) * n_experts;
  const size_t codes_total = align16(static_cast<size_t>(words) * 4), scales_total = align16(groups * 2);
  m.storage = DeviceBuffer(codes_total + 2 * scales_total);
  auto* base = m.storage.as<uint8_t>();
  fill_random_words(reinterpret_cast<uint32_t*>(base), words, seed, stream);
  // Codes uniform on 0..2^bits-1, scale about 2/(2^bits sqrt(cols)), bias centring the values near 0.
  const float levels = static_cast<float>((1 << bits) - 1);
  const float s = 2.0f / (levels * std::sqrt(static_cast<float>(cols)));
  fill_random_bf16(reinterpret_cast<uint16_t*>(base + codes_total), groups, seed + 1, 0.5f * s, 1.5f * s,
                   stream);
  fill_random_bf16(reinterpret_cast<uint16_t*>(base + codes_total + scales_total), groups, seed + 2,
                   -0.5f * levels * s - 0.1f * s, -0.5f * levels * s + 0.1f * s, stream);
  m.affine = AffineWeight{reinterpret_cast<const uint32_t*>(base),
                          reinterpret_cast<const uint16_t*>(base + codes_total),
                          reinterpret_cast<const uint16_t*>(base + codes_total + scales_total),
                          rows,
                          cols,
                          bits,
                          group,
                          n_experts};
  return m;
}

void wx(const DeviceMatrix& m, const float* x, int64_t ldx, int n_rows, float* y, int64_t ldy,
        cudaStream_t stream) {
  if (m.n_experts != 1) fail("wx: a stacked expert matrix needs wx_grouped");
  const bool fast_x = ldx % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0;
  for (int r0 = 0; r0 < n_rows; r0 += kMaxWindowRows) {
    const int rows = std::min(kMaxWindowRows, n_rows - r0);
    const float* xr = x + r0 * ldx;
    float* yr = y + r0 * ldy;
    const Activations act{xr, ActType::F32, ldx};
    switch (m.kind) {
      case DeviceMatrix::Kind::Affine:
        if (!fast_x)
          fail("wx: activations for an affine matrix need rows of a multiple of 8 floats (got {})", ldx);
        affine_wx(m.affine, act, rows, yr, ldy, stream);
        break;
      case DeviceMatrix::Kind::Bf16:
        if (fast_x && m.cols % 8 == 0)
          dense_wx(DenseBf16Weight{static_cast<const uint16_t*>(m.dense), m.rows, m.cols}, act, rows, yr, ldy,
                   stream);
        else
          plain_wx(m.dense, true, m.rows, m.cols, 0, 1, nullptr, rows, xr, ldx, yr, ldy, stream);
        break;
      case DeviceMatrix::Kind::F32:
        plain_wx(m.dense, false, m.rows, m.cols, 0, 1, nullptr, rows, xr, ldx, yr, ldy, stream);
        break;
      case DeviceMatrix::Kind::None:
        fail("wx: the matrix was not uploaded");
    }
  }
}

void wx_grouped(const DeviceMatrix& m, const ExpertRow* pairs, int n_pairs, const float* x, int64_t ldx,
                int n_x_rows, float* y, int64_t ldy, cudaStream_t stream, bool pairs_ready) {
  if (n_pairs <= 0) return;
  switch (m.kind) {
    case DeviceMatrix::Kind::Affine:
      if (ldx % 8 != 0) fail("wx_grouped: activations need rows of a multiple of 8 floats (got {})", ldx);
      affine_wx_grouped(m.affine, pairs, n_pairs, Activations{x, ActType::F32, ldx}, n_x_rows, y, ldy, stream,
                        pairs_ready);
      return;
    case DeviceMatrix::Kind::Bf16:
    case DeviceMatrix::Kind::F32:
      plain_wx(m.dense, m.kind == DeviceMatrix::Kind::Bf16, m.rows, m.cols, m.rows * m.cols,
               static_cast<int>(m.n_experts), pairs, n_pairs, x, ldx, y, ldy, stream);
      return;
    case DeviceMatrix::Kind::None:
      fail("wx_grouped: the matrix was not uploaded");
  }
}

void wx_windows(const DeviceMatrix& m, const ExpertWindow* windows, int n_windows, const int32_t* row_ids,
                const float* x, int64_t ldx, int n_x_rows, float* y, int64_t ldy, cudaStream_t stream) {
  if (m.kind != DeviceMatrix::Kind::Affine) fail("wx_windows: expert windows need an MLX affine matrix");
  if (ldx % 8 != 0) fail("wx_windows: activations need rows of a multiple of 8 floats (got {})", ldx);
  if (n_windows <= 0) return;
  affine_wx_expert_windows(m.affine, windows, n_windows, row_ids, Activations{x, ActType::F32, ldx}, n_x_rows,
                           y, ldy, stream);
}

DeviceBuffer upload_floats(const std::vector<float>& v) {
  DeviceBuffer b(v.size() * sizeof(float));
  if (!v.empty()) b.upload(v.data(), v.size() * sizeof(float), "upload_floats");
  return b;
}

DeviceBuffer random_floats(int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  DeviceBuffer b(static_cast<size_t>(n) * sizeof(float));
  fill_random_f32(b.as<float>(), n, seed, lo, hi, stream);
  return b;
}

}  // namespace ds::cuda
