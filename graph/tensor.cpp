#include "graph/tensor.h"

#include <cmath>
#include <cstring>
#include <new>

#include "graph/error.h"

namespace trainrt {

size_t dtype_size(DataType t) {
  switch (t) {
    case DataType::Float32:
    case DataType::Int32:
    case DataType::UInt32:
      return 4;
    case DataType::Float64:
    case DataType::Int64:
    case DataType::UInt64:
      return 8;
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Int16:
    case DataType::UInt16:
      return 2;
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Bool:
      return 1;
    default:
      return 0;
  }
}

const char* dtype_name(DataType t) {
  switch (t) {
    case DataType::Float32:
      return "float32";
    case DataType::Float64:
      return "float64";
    case DataType::Float16:
      return "float16";
    case DataType::BFloat16:
      return "bfloat16";
    case DataType::Int8:
      return "int8";
    case DataType::UInt8:
      return "uint8";
    case DataType::Int16:
      return "int16";
    case DataType::UInt16:
      return "uint16";
    case DataType::Int32:
      return "int32";
    case DataType::UInt32:
      return "uint32";
    case DataType::Int64:
      return "int64";
    case DataType::UInt64:
      return "uint64";
    case DataType::Bool:
      return "bool";
    case DataType::String:
      return "string";
    default:
      return "undefined";
  }
}

bool dtype_is_float(DataType t) {
  return t == DataType::Float32 || t == DataType::Float64 || t == DataType::Float16 || t == DataType::BFloat16;
}

bool dtype_is_supported(DataType t) { return dtype_size(t) != 0; }

int64_t element_count(const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  return n;
}

std::string dims_to_string(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (size_t i = 0; i < dims.size(); ++i) s += (i ? "," : "") + std::to_string(dims[i]);
  return s + "]";
}

namespace {
std::shared_ptr<std::byte[]> allocate(size_t bytes) {
  // 64-byte alignment suits AVX-512 loads and oneDNN's preferred alignment.
  size_t n = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  auto* p = static_cast<std::byte*>(::operator new[](n, std::align_val_t(64)));
  std::memset(p, 0, n);
  return std::shared_ptr<std::byte[]>(p, [](std::byte* q) { ::operator delete[](q, std::align_val_t(64)); });
}
}  // namespace

Tensor::Tensor(DataType dtype, std::vector<int64_t> dims) : dtype_(dtype), dims_(std::move(dims)) {
  for (int64_t d : dims_)
    if (d < 0) throw_internal("Tensor", "negative dimension in " + dims_to_string(dims_));
  buffer_ = allocate(nbytes());
}

Tensor Tensor::clone() const {
  Tensor t(dtype_, dims_);
  if (nbytes()) std::memcpy(t.raw(), raw(), nbytes());
  t.layout_ = layout_;
  t.narrowed_ = narrowed_;
  return t;
}

bool blockable(const std::vector<int64_t>& dims) { return dims.size() == 4 && dims[1] > 0 && dims[1] % 16 == 0; }

int64_t blocked_to_plain_index(const std::vector<int64_t>& d, int64_t offset) {
  const int64_t hw = d[2] * d[3], cb_count = d[1] / 16;
  const int64_t c16 = offset % 16, s = (offset / 16) % hw, ncb = offset / (16 * hw);
  const int64_t n = ncb / cb_count, c = (ncb % cb_count) * 16 + c16;
  return (n * d[1] + c) * hw + s;
}

bool layout_fits(Layout l, const std::vector<int64_t>& d) {
  switch (l) {
    case Layout::Plain:
      return true;
    case Layout::Blocked16c:
      return blockable(d);
    case Layout::ChannelsLast:
      return d.size() == 4 && d[0] > 0 && d[1] > 1 && d[2] * d[3] > 1;
  }
  return false;
}

int64_t storage_to_plain_index(Layout l, const std::vector<int64_t>& d, int64_t offset) {
  switch (l) {
    case Layout::Plain:
      return offset;
    case Layout::Blocked16c:
      return blocked_to_plain_index(d, offset);
    case Layout::ChannelsLast: {
      const int64_t C = d[1], hw = d[2] * d[3];
      const int64_t c = offset % C, s = (offset / C) % hw, n = offset / (C * hw);
      return (n * C + c) * hw + s;
    }
  }
  return offset;
}

namespace {
// Copies between the storage of `from` (from_blocked) or `to` in their non-Plain layout
// and the other, Plain, tensor.
void copy_blocked(const Tensor& from, Tensor& to, bool from_blocked) {
  const size_t es = dtype_size(from.dtype());
  const std::byte* src = from.raw();
  std::byte* dst = to.raw();
  const int64_t count = from.numel();
  const Layout l = from_blocked ? from.layout() : to.layout();
  for (int64_t off = 0; off < count; ++off) {
    const int64_t i = storage_to_plain_index(l, from.dims(), off);
    if (from_blocked)
      std::memcpy(dst + static_cast<size_t>(i) * es, src + static_cast<size_t>(off) * es, es);
    else
      std::memcpy(dst + static_cast<size_t>(off) * es, src + static_cast<size_t>(i) * es, es);
  }
}
}  // namespace

Tensor to_plain(const Tensor& t) {
  if (t.layout() == Layout::Plain) return t.clone();
  Tensor p(t.dtype(), t.dims());
  copy_blocked(t, p, /*from_blocked=*/true);
  p.set_narrowed(t.narrowed());
  return p;
}

void copy_from_plain(const Tensor& plain, Tensor& to) {
  if (plain.dims() != to.dims() || plain.dtype() != to.dtype() || plain.layout() != Layout::Plain)
    throw_internal("copy_from_plain", dims_to_string(plain.dims()) + " -> " + dims_to_string(to.dims()));
  if (to.layout() == Layout::Plain) {
    if (to.nbytes()) std::memcpy(to.raw(), plain.raw(), to.nbytes());
    return;
  }
  copy_blocked(plain, to, /*from_blocked=*/false);
}

Tensor Tensor::reshaped(std::vector<int64_t> dims) const {
  if (element_count(dims) != numel())
    throw_internal("Tensor::reshaped", dims_to_string(dims_) + " -> " + dims_to_string(dims));
  if (layout_ != Layout::Plain) throw_internal("Tensor::reshaped", "a blocked tensor has no row-major view");
  Tensor t = *this;
  t.dims_ = std::move(dims);
  return t;
}

double Tensor::get_as_double(int64_t i) const {
  switch (dtype_) {
    case DataType::Float32:
      return data<float>()[i];
    case DataType::Float64:
      return data<double>()[i];
    case DataType::Float16:
      return half_to_float(data<uint16_t>()[i]);
    case DataType::BFloat16:
      return bfloat16_to_float(data<uint16_t>()[i]);
    case DataType::Int8:
      return data<int8_t>()[i];
    case DataType::UInt8:
      return data<uint8_t>()[i];
    case DataType::Int16:
      return data<int16_t>()[i];
    case DataType::UInt16:
      return data<uint16_t>()[i];
    case DataType::Int32:
      return data<int32_t>()[i];
    case DataType::UInt32:
      return data<uint32_t>()[i];
    case DataType::Int64:
      return static_cast<double>(data<int64_t>()[i]);
    case DataType::UInt64:
      return static_cast<double>(data<uint64_t>()[i]);
    case DataType::Bool:
      return data<uint8_t>()[i] ? 1.0 : 0.0;
    default:
      throw_internal("Tensor::get_as_double", std::string("dtype ") + dtype_name(dtype_));
  }
}

void Tensor::set_from_double(int64_t i, double v) {
  switch (dtype_) {
    case DataType::Float32:
      data<float>()[i] = static_cast<float>(v);
      break;
    case DataType::Float64:
      data<double>()[i] = v;
      break;
    case DataType::Float16:
      data<uint16_t>()[i] = float_to_half(static_cast<float>(v));
      break;
    case DataType::BFloat16:
      data<uint16_t>()[i] = float_to_bfloat16(static_cast<float>(v));
      break;
    case DataType::Int8:
      data<int8_t>()[i] = static_cast<int8_t>(v);
      break;
    case DataType::UInt8:
      data<uint8_t>()[i] = static_cast<uint8_t>(v);
      break;
    case DataType::Int16:
      data<int16_t>()[i] = static_cast<int16_t>(v);
      break;
    case DataType::UInt16:
      data<uint16_t>()[i] = static_cast<uint16_t>(v);
      break;
    case DataType::Int32:
      data<int32_t>()[i] = static_cast<int32_t>(v);
      break;
    case DataType::UInt32:
      data<uint32_t>()[i] = static_cast<uint32_t>(v);
      break;
    case DataType::Int64:
      data<int64_t>()[i] = static_cast<int64_t>(v);
      break;
    case DataType::UInt64:
      data<uint64_t>()[i] = static_cast<uint64_t>(v);
      break;
    case DataType::Bool:
      data<uint8_t>()[i] = v != 0.0;
      break;
    default:
      throw_internal("Tensor::set_from_double", std::string("dtype ") + dtype_name(dtype_));
  }
}

Tensor Tensor::cast(DataType to) const {
  Tensor t(to, dims_);
  const int64_t n = numel();
  if (to == DataType::Int64 && dtype_ == DataType::Int64) return clone();
  for (int64_t i = 0; i < n; ++i) t.set_from_double(i, get_as_double(i));
  t.layout_ = layout_;  // element by element: storage order unchanged
  return t;
}

}  // namespace trainrt
