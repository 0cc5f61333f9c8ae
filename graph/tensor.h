// Host tensors: a dtype, dims and a 64-byte aligned, shared buffer.
//
//   Tensor t(DataType::Float32, {2, 3});   // zero-filled
//   t.data<float>()[0] = 1.f;
//   Tensor v = t;                           // shares the buffer (cheap copy)
//   Tensor c = t.clone();                   // deep copy
//
// Why: initializers, ONNX test data and runtime buffers all use this one type;
// layouts are dense row-major (N,C,H,W for images) unless a backend says otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/float16.h"

namespace trainrt {

// Values match onnx::TensorProto::DataType so conversion is a cast.
enum class DataType : int32_t {
  Undefined = 0,
  Float32 = 1,
  UInt8 = 2,
  Int8 = 3,
  UInt16 = 4,
  Int16 = 5,
  Int32 = 6,
  Int64 = 7,
  String = 8,
  Bool = 9,
  Float16 = 10,
  Float64 = 11,
  UInt32 = 12,
  UInt64 = 13,
  BFloat16 = 16,
};

size_t dtype_size(DataType t);        // 0 for Undefined and String
const char* dtype_name(DataType t);   // "float32", "int64", ...
bool dtype_is_float(DataType t);      // float16/bfloat16/float32/float64
bool dtype_is_supported(DataType t);  // every numeric type trainrt stores

// How a backend stores the elements of a tensor. Plain is dense row-major. Blocked16c
// is oneDNN's nChw16c for a rank-4 [N,C,H,W] tensor with C a multiple of 16:
// element (n,c,h,w) sits at ((n*C/16 + c/16)*H*W + h*W + w)*16 + c%16, so it has the
// same size as the plain form and elementwise ops on two tensors of one layout are
// unaffected. Only runtime arena values between kernels that accept it are blocked
// (runtime/layout.h); everything a user sees is Plain. ChannelsLast is NHWC for a
// rank-4 [N,C,H,W] tensor: element (n,c,h,w) sits at ((n*H + h)*W + w)*C + c, the form
// cuDNN's tensor-core convolutions read without transposing (the cuda backend's
// layout; also the same size as the plain form).
enum class Layout : uint8_t { Plain, Blocked16c, ChannelsLast };

int64_t element_count(const std::vector<int64_t>& dims);       // 1 for a scalar
std::string dims_to_string(const std::vector<int64_t>& dims);  // "[2,3]"

class Tensor {
 public:
  Tensor() = default;
  Tensor(DataType dtype, std::vector<int64_t> dims);  // zero-filled
  // A view of memory owned elsewhere (the runtime's arena): `buffer` is usually an
  // aliasing shared_ptr into a larger block, which it keeps alive. Not zero-filled.
  Tensor(DataType dtype, std::vector<int64_t> dims, std::shared_ptr<std::byte[]> buffer)
      : dtype_(dtype), dims_(std::move(dims)), buffer_(std::move(buffer)) {}

  DataType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int64_t rank() const { return static_cast<int64_t>(dims_.size()); }
  int64_t numel() const { return element_count(dims_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  bool empty() const { return dtype_ == DataType::Undefined; }
  Layout layout() const { return layout_; }
  void set_layout(Layout l) { layout_ = l; }
  // A float32 value of the graph stored rounded in dtype() (Float16 or BFloat16), because
  // every kernel that reads it rounds it to that type anyway (runtime/narrow.h): kernels
  // that declared the slot read and write the 16-bit elements; a reference kernel gets a
  // float32 copy (run_on_plain_copies). Same bits as rounding at each read.
  bool narrowed() const { return narrowed_; }
  void set_narrowed(bool n) { narrowed_ = n; }

  std::byte* raw() { return buffer_.get(); }
  const std::byte* raw() const { return buffer_.get(); }
  template <typename T>
  T* data() {
    return reinterpret_cast<T*>(buffer_.get());
  }
  template <typename T>
  const T* data() const {
    return reinterpret_cast<const T*>(buffer_.get());
  }

  Tensor clone() const;
  // Same buffer, new dims with the same element count (Reshape, Flatten).
  Tensor reshaped(std::vector<int64_t> dims) const;
  // Element i converted to double, for any numeric dtype (tests, small tensors).
  double get_as_double(int64_t i) const;
  void set_from_double(int64_t i, double v);
  // A copy in another dtype (numeric conversions only).
  Tensor cast(DataType to) const;

 private:
  DataType dtype_ = DataType::Undefined;
  std::vector<int64_t> dims_;
  std::shared_ptr<std::byte[]> buffer_;
  Layout layout_ = Layout::Plain;
  bool narrowed_ = false;
};

// Whether `dims` can be stored as Blocked16c (rank 4, C a positive multiple of 16).
bool blockable(const std::vector<int64_t>& dims);
// Whether storing `dims` in `l` is possible and differs from Plain: Blocked16c as
// blockable(); ChannelsLast for rank 4 with C > 1 and H*W > 1 (with either of them 1
// the two orders are the same bytes); Plain always.
bool layout_fits(Layout l, const std::vector<int64_t>& dims);
// Plain index of the element at storage offset `offset` of a tensor stored in `l`.
int64_t storage_to_plain_index(Layout l, const std::vector<int64_t>& dims, int64_t offset);
// Plain index of the element at storage offset `offset` of a Blocked16c tensor.
int64_t blocked_to_plain_index(const std::vector<int64_t>& dims, int64_t offset);
// Walks the storage offsets of a Blocked16c tensor from `offset` on, in order, giving
// each one's row-major index without a division per element:
//   for (BlockedWalk w(dims, begin); w.offset < end; w.next()) use(w.offset, w.plain);
struct BlockedWalk {
  BlockedWalk(const std::vector<int64_t>& dims, int64_t start)
      : hw(dims[2] * dims[3]), offset(start), plain(blocked_to_plain_index(dims, start)) {
    lane = start % 16;
    s = (start / 16) % hw;
  }
  void next() {
    ++offset;
    if (++lane < 16) {
      plain += hw;  // next channel, same position
      return;
    }
    lane = 0;
    plain -= 15 * hw;
    if (++s < hw) {
      plain += 1;  // next position, first channel of the block
      return;
    }
    s = 0;  // next channel block (or the next image: C blocks follow each other)
    plain += 16 * hw - (hw - 1);
  }
  int64_t hw, offset, plain, lane = 0, s = 0;
};
// A Plain deep copy of `t` in any layout, and the reverse (into `to`'s layout).
Tensor to_plain(const Tensor& t);
void copy_from_plain(const Tensor& plain, Tensor& to);

}  // namespace trainrt
