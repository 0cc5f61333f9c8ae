// TensorProto files (ONNX test data, `trainrt run` inputs and outputs): write/read
// round trips for every dtype, the typed fields other writers use (float_data,
// int32_data for small ints, bool and 16-bit floats, int64_data, double_data,
// uint64_data), every size mismatch and truncation as a BadInput error, and the
// half/bfloat16 conversions against known bit patterns.
#include <doctest/doctest.h>
#include <onnx/onnx_pb.h>
#include <unistd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "test_util.h"

using namespace trainrt;
using trainrt::test::TempDir;
namespace fs = std::filesystem;

namespace {

const DataType kAllDtypes[] = {DataType::Float32, DataType::UInt8,   DataType::Int8,   DataType::UInt16,
                               DataType::Int16,   DataType::Int32,   DataType::Int64,  DataType::Bool,
                               DataType::Float16, DataType::Float64, DataType::UInt32, DataType::UInt64,
                               DataType::BFloat16};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) { return read_file_bytes(path, 1 << 30); }

std::string serialize(const onnx::TensorProto& p) {
  std::string s;
  REQUIRE(p.SerializeToString(&s));
  return s;
}

// Reads `p` through a file, as `trainrt run` does.
Tensor read_proto(const TempDir& dir, const onnx::TensorProto& p) {
  std::string f = dir.file("t.pb");
  write_bytes(f, serialize(p));
  return read_tensor_file(f);
}

// The Error thrown by f(); fails the test if f does not throw one.
template <typename F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected a trainrt::Error");
  return Error(ErrorKind::Internal, "not thrown");
}

onnx::TensorProto proto(DataType t, std::vector<int64_t> dims) {
  onnx::TensorProto p;
  p.set_data_type(static_cast<int32_t>(t));
  for (int64_t d : dims) p.add_dims(d);
  return p;
}

// Deterministic, distinct element bytes; bools stay 0/1.
Tensor pattern_tensor(DataType t, std::vector<int64_t> dims) {
  Tensor x(t, std::move(dims));
  for (size_t i = 0; i < x.nbytes(); ++i)
    x.raw()[i] = std::byte(t == DataType::Bool ? (i % 3 == 0) : static_cast<unsigned char>(i * 37 + 11));
  return x;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("raw_data round trip for every supported dtype, scalar and empty shapes included") {
  TempDir dir;
  for (DataType t : kAllDtypes) {
    for (const std::vector<int64_t>& dims : {std::vector<int64_t>{2, 3, 4}, {}, {0, 5}, {1}}) {
      CAPTURE(dtype_name(t));
      CAPTURE(dims_to_string(dims));
      Tensor x = pattern_tensor(t, dims);
      std::string f = dir.file(std::string(dtype_name(t)) + ".pb");
      write_tensor_file(x, f, "my_tensor");
      Tensor y = read_tensor_file(f);
      CHECK(same_bytes(x, y));
      // The file is a plain TensorProto any ONNX tool reads: name, type, dims, raw_data.
      onnx::TensorProto p;
      REQUIRE(p.ParseFromString(read_bytes(f)));
      CHECK(p.name() == "my_tensor");
      CHECK(p.data_type() == static_cast<int32_t>(t));
      CHECK(std::vector<int64_t>(p.dims().begin(), p.dims().end()) == dims);
      CHECK(p.raw_data().size() == x.nbytes());
    }
  }
}

TEST_CASE("typed fields: float_data, double_data, int64_data") {
  TempDir dir;
  onnx::TensorProto f = proto(DataType::Float32, {2, 2});
  for (float v : {1.5f, -2.f, std::numeric_limits<float>::infinity(), 1e-40f}) f.add_float_data(v);
  Tensor tf = read_proto(dir, f);
  REQUIRE(tf.dtype() == DataType::Float32);
  CHECK(tf.dims() == std::vector<int64_t>{2, 2});
  CHECK(tf.data<float>()[0] == 1.5f);
  CHECK(tf.data<float>()[1] == -2.f);
  CHECK(std::isinf(tf.data<float>()[2]));
  CHECK(tf.data<float>()[3] == 1e-40f);  // subnormals survive

  onnx::TensorProto d = proto(DataType::Float64, {3});
  for (double v : {0.1, -1e300, 5e-324}) d.add_double_data(v);
  Tensor td = read_proto(dir, d);
  REQUIRE(td.dtype() == DataType::Float64);
  CHECK(td.data<double>()[0] == 0.1);
  CHECK(td.data<double>()[1] == -1e300);
  CHECK(td.data<double>()[2] == 5e-324);

  // int64 values beyond 2^53 must not pass through a double.
  onnx::TensorProto l = proto(DataType::Int64, {4});
  const int64_t big = (int64_t{1} << 62) + 1;
  for (int64_t v : {big, -big, std::numeric_limits<int64_t>::min(), int64_t{-1}}) l.add_int64_data(v);
  Tensor tl = read_proto(dir, l);
  REQUIRE(tl.dtype() == DataType::Int64);
  CHECK(tl.data<int64_t>()[0] == big);
  CHECK(tl.data<int64_t>()[1] == -big);
  CHECK(tl.data<int64_t>()[2] == std::numeric_limits<int64_t>::min());
  CHECK(tl.data<int64_t>()[3] == -1);

  // A scalar: no dims, one value.
  onnx::TensorProto s = proto(DataType::Float32, {});
  s.add_float_data(7.f);
  Tensor ts = read_proto(dir, s);
  CHECK(ts.dims().empty());
  CHECK(ts.data<float>()[0] == 7.f);
}

TEST_CASE("typed fields: int32_data holds int8, uint8, int16, uint16, int32, bool and 16-bit float bits") {
  TempDir dir;
  auto ints = [&](DataType t, std::vector<int32_t> v) {
    onnx::TensorProto p = proto(t, {static_cast<int64_t>(v.size())});
    for (int32_t x : v) p.add_int32_data(x);
    Tensor r = read_proto(dir, p);
    REQUIRE(r.dtype() == t);
    REQUIRE(r.numel() == static_cast<int64_t>(v.size()));
    return r;
  };
  Tensor i8 = ints(DataType::Int8, {-128, -1, 0, 127});
  CHECK(i8.data<int8_t>()[0] == -128);
  CHECK(i8.data<int8_t>()[1] == -1);
  CHECK(i8.data<int8_t>()[3] == 127);
  Tensor u8 = ints(DataType::UInt8, {0, 1, 200, 255});
  CHECK(u8.data<uint8_t>()[2] == 200);
  CHECK(u8.data<uint8_t>()[3] == 255);
  Tensor i16 = ints(DataType::Int16, {-32768, 32767});
  CHECK(i16.data<int16_t>()[0] == -32768);
  CHECK(i16.data<int16_t>()[1] == 32767);
  Tensor u16 = ints(DataType::UInt16, {0, 65535});
  CHECK(u16.data<uint16_t>()[1] == 65535);
  Tensor i32 = ints(DataType::Int32, {std::numeric_limits<int32_t>::min(), std::numeric_limits<int32_t>::max()});
  CHECK(i32.data<int32_t>()[0] == std::numeric_limits<int32_t>::min());
  CHECK(i32.data<int32_t>()[1] == std::numeric_limits<int32_t>::max());
  Tensor b = ints(DataType::Bool, {1, 0, 1});
  CHECK(b.data<uint8_t>()[0] == 1);
  CHECK(b.data<uint8_t>()[1] == 0);
  CHECK(b.data<uint8_t>()[2] == 1);
  // float16 and bfloat16 are stored as their bit patterns, not as values.
  Tensor h = ints(DataType::Float16, {0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00});
  CHECK(h.data<uint16_t>()[0] == 0x3c00);
  CHECK(h.get_as_double(0) == 1.0);
  CHECK(h.get_as_double(1) == -2.0);
  CHECK(h.get_as_double(2) == 65504.0);
  CHECK(h.get_as_double(3) == std::ldexp(1.0, -24));
  CHECK(std::isinf(h.get_as_double(4)));
  Tensor bf = ints(DataType::BFloat16, {0x3f80, 0xc040});
  CHECK(bf.data<uint16_t>()[1] == 0xc040);
  CHECK(bf.get_as_double(0) == 1.0);
  CHECK(bf.get_as_double(1) == -3.0);
}

TEST_CASE("typed fields: uint64_data holds uint32 and uint64") {
  TempDir dir;
  onnx::TensorProto u32 = proto(DataType::UInt32, {2});
  u32.add_uint64_data(0);
  u32.add_uint64_data(0xffffffffu);
  Tensor t32 = read_proto(dir, u32);
  REQUIRE(t32.dtype() == DataType::UInt32);
  CHECK(t32.data<uint32_t>()[1] == 0xffffffffu);
  onnx::TensorProto u64 = proto(DataType::UInt64, {2});
  u64.add_uint64_data(0);
  u64.add_uint64_data(uint64_t{1} << 53);  // exact in a double
  Tensor t64 = read_proto(dir, u64);
  REQUIRE(t64.dtype() == DataType::UInt64);
  CHECK(t64.data<uint64_t>()[1] == uint64_t{1} << 53);
}

// uint64_data is copied exactly, never through a double.
TEST_CASE("typed fields: uint64_data above 2^53 is exact") {
  TempDir dir;
  onnx::TensorProto u64 = proto(DataType::UInt64, {2});
  u64.add_uint64_data((uint64_t{1} << 53) + 1);
  u64.add_uint64_data(std::numeric_limits<uint64_t>::max());
  Tensor t = read_proto(dir, u64);
  CHECK(t.data<uint64_t>()[0] == (uint64_t{1} << 53) + 1);
  CHECK(t.data<uint64_t>()[1] == std::numeric_limits<uint64_t>::max());
}

TEST_CASE("element counts that disagree with dims are BadInput naming the field") {
  TempDir dir;
  struct Case {
    DataType t;
    const char* field;
    void (*fill)(onnx::TensorProto&, int);
  };
  const Case cases[] = {
      {DataType::Float32, "float_data",
       [](onnx::TensorProto& p, int n) {
         for (int i = 0; i < n; ++i) p.add_float_data(1);
       }},
      {DataType::Float64, "double_data",
       [](onnx::TensorProto& p, int n) {
         for (int i = 0; i < n; ++i) p.add_double_data(1);
       }},
      {DataType::Int64, "int64_data",
       [](onnx::TensorProto& p, int n) {
         for (int i = 0; i < n; ++i) p.add_int64_data(1);
       }},
      {DataType::Int32, "int32_data",
       [](onnx::TensorProto& p, int n) {
         for (int i = 0; i < n; ++i) p.add_int32_data(1);
       }},
      {DataType::Int8, "int32_data",
       [](onnx::TensorProto& p, int n) {
         for (int i = 0; i < n; ++i) p.add_int32_data(1);
       }},
      {DataType::Bool, "int32_data",
       [](onnx::TensorProto& p, int n) {
         for (int i = 0; i < n; ++i) p.add_int32_data(1);
       }},
      {DataType::Float16, "int32_data",
       [](onnx::TensorProto& p, int n) {
         for (int i = 0; i < n; ++i) p.add_int32_data(0x3c00);
       }},
      {DataType::UInt64, "uint64_data",
       [](onnx::TensorProto& p, int n) {
         for (int i = 0; i < n; ++i) p.add_uint64_data(1);
       }},
  };
  for (const Case& c : cases) {
    for (int n : {0, 5, 7}) {  // dims [2,3] need 6
      CAPTURE(dtype_name(c.t));
      CAPTURE(n);
      onnx::TensorProto p = proto(c.t, {2, 3});
      c.fill(p, n);
      Error e = error_of([&] { read_proto(dir, p); });
      CHECK(e.kind() == ErrorKind::BadInput);
      CHECK(std::string(e.what()).find(std::string(c.field) + " holds " + std::to_string(n) + " values, dims need 6") !=
            std::string::npos);
      CHECK(std::string(e.what()).find(dir.file("t.pb")) == 0);  // names the file first
    }
  }
}

TEST_CASE("raw_data whose size disagrees with dims and dtype is BadInput") {
  TempDir dir;
  for (size_t bytes : {size_t{0}, size_t{23}, size_t{25}, size_t{48}}) {
    CAPTURE(bytes);
    onnx::TensorProto p = proto(DataType::Float32, {2, 3});  // needs 24 bytes
    p.set_raw_data(std::string(bytes, '\x01'));
    Error e = error_of([&] { read_proto(dir, p); });
    CHECK(e.kind() == ErrorKind::BadInput);
    CAPTURE(std::string(e.what()));
    // No raw_data at all trips the "more bytes than the file" check first.
    if (bytes > 0)
      CHECK(std::string(e.what()).find("raw_data has " + std::to_string(bytes) + " bytes") != std::string::npos);
  }
  onnx::TensorProto half = proto(DataType::Float16, {3});
  half.set_raw_data(std::string(3, '\0'));  // 3 bytes for 3 halves
  CHECK(error_of([&] { read_proto(dir, half); }).kind() == ErrorKind::BadInput);
}

TEST_CASE("truncated files are BadInput; every prefix is an error, never a crash or a tensor") {
  TempDir dir;
  Tensor x = pattern_tensor(DataType::Float32, {4, 5});
  std::string full_path = dir.file("full.pb");
  write_tensor_file(x, full_path, "x");
  const std::string full = read_bytes(full_path);
  // Cut inside raw_data, the usual way a copy goes wrong.
  for (size_t cut : {full.size() - 1, full.size() - 40, full.size() / 2}) {
    CAPTURE(cut);
    std::string f = dir.file("cut.pb");
    write_bytes(f, full.substr(0, cut));
    Error e = error_of([&] { read_tensor_file(f); });
    CHECK(e.kind() == ErrorKind::BadInput);
    CHECK(std::string(e.what()).find(f) == 0);
  }
  for (size_t cut = 1; cut < full.size(); ++cut) {
    CAPTURE(cut);
    std::string f = dir.file("prefix.pb");
    write_bytes(f, full.substr(0, cut));
    Error e = error_of([&] { read_tensor_file(f); });
    CHECK(e.exit_code() == 2);
  }
}

TEST_CASE("other malformed tensor files") {
  TempDir dir;
  CHECK(error_of([&] { read_tensor_file(dir.file("missing.pb")); }).kind() == ErrorKind::BadInput);
  CHECK(error_of([&] { read_tensor_file(dir.path.string()); }).kind() == ErrorKind::BadInput);  // a folder

  onnx::TensorProto neg = proto(DataType::Float32, {2, -3});
  CHECK(error_of([&] { read_proto(dir, neg); }).kind() == ErrorKind::BadInput);

  onnx::TensorProto huge = proto(DataType::Float32, {int64_t{1} << 40, int64_t{1} << 40});
  huge.set_raw_data("abcd");
  CHECK(error_of([&] { read_proto(dir, huge); }).kind() == ErrorKind::BadInput);

  // External data has no folder to live in when the tensor is a standalone file.
  onnx::TensorProto ext = proto(DataType::Float32, {2});
  ext.set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = ext.add_external_data();
  kv->set_key("location");
  kv->set_value("weights.bin");
  Error e = error_of([&] { read_proto(dir, ext); });
  CHECK(e.kind() == ErrorKind::BadInput);
  CHECK(std::string(e.what()).find("external data") != std::string::npos);

  onnx::TensorProto str = proto(DataType::String, {1});
  str.add_string_data("hello");
  CHECK(error_of([&] { read_proto(dir, str); }).kind() == ErrorKind::Unsupported);
}

TEST_CASE("half <-> float at known bit patterns") {
  struct H {
    uint16_t bits;
    float value;
  };
  const H exact[] = {
      {0x0000, 0.f},
      {0x3c00, 1.f},
      {0xc000, -2.f},
      {0x3800, 0.5f},
      {0x7bff, 65504.f},
      {0x0400, 6.103515625e-05f},         // smallest normal 2^-14
      {0x0001, 5.9604644775390625e-08f},  // smallest subnormal 2^-24
      {0x03ff, 6.097555160522461e-05f},   // largest subnormal 1023 * 2^-24
      {0x3555, 0.333251953125f},
      {0x2e66, 0.0999755859375f},
  };
  for (const H& h : exact) {
    CAPTURE(h.bits);
    CHECK(half_to_float(h.bits) == h.value);
    CHECK(float_to_half(h.value) == h.bits);
  }
  CHECK(std::signbit(half_to_float(0x8000)));
  CHECK(float_to_half(-0.f) == 0x8000);
  CHECK(half_to_float(0x7c00) == std::numeric_limits<float>::infinity());
  CHECK(half_to_float(0xfc00) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(half_to_float(0x7e00)));
  CHECK(std::isnan(half_to_float(0x7c01)));

  // Rounding: nearest, ties to even; overflow to infinity from 65520 on.
  CHECK(float_to_half(0.1f) == 0x2e66);
  CHECK(float_to_half(1.f + std::ldexp(1.f, -11)) == 0x3c00);      // tie -> even (down)
  CHECK(float_to_half(1.f + 3 * std::ldexp(1.f, -11)) == 0x3c02);  // tie -> even (up)
  CHECK(float_to_half(65519.f) == 0x7bff);
  CHECK(float_to_half(65520.f) == 0x7c00);
  CHECK(float_to_half(1e6f) == 0x7c00);
  CHECK(float_to_half(-1e6f) == 0xfc00);
  CHECK(float_to_half(std::numeric_limits<float>::infinity()) == 0x7c00);
  CHECK(float_to_half(std::ldexp(1.f, -25)) == 0x0000);      // tie between 0 and 2^-24 -> 0
  CHECK(float_to_half(3 * std::ldexp(1.f, -25)) == 0x0002);  // tie between 1 and 2 ulps -> 2
  CHECK(float_to_half(std::ldexp(1.f, -30)) == 0x0000);      // underflow
  uint16_t nan = float_to_half(std::numeric_limits<float>::quiet_NaN());
  CHECK((nan & 0x7c00) == 0x7c00);
  CHECK((nan & 0x03ff) != 0);

  // Every half survives half -> float -> half (NaNs stay NaN).
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    uint16_t h = static_cast<uint16_t>(b);
    float f = half_to_float(h);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(half_to_float(float_to_half(f))));
    } else {
      REQUIRE(float_to_half(f) == h);
    }
  }
}

TEST_CASE("bfloat16 <-> float at known bit patterns") {
  CHECK(bfloat16_to_float(0x3f80) == 1.f);
  CHECK(bfloat16_to_float(0xc040) == -3.f);
  CHECK(bfloat16_to_float(0x7f7f) == std::bit_cast<float>(0x7f7f0000u));  // largest finite
  CHECK(bfloat16_to_float(0x0001) == std::bit_cast<float>(0x00010000u));  // subnormal
  CHECK(bfloat16_to_float(0x7f80) == std::numeric_limits<float>::infinity());
  CHECK(bfloat16_to_float(0xff80) == -std::numeric_limits<float>::infinity());
  CHECK(std::isnan(bfloat16_to_float(0x7fc0)));

  CHECK(float_to_bfloat16(1.f) == 0x3f80);
  CHECK(float_to_bfloat16(0.1f) == 0x3dcd);                               // 0x3dcccccd rounds up
  CHECK(float_to_bfloat16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie -> even (down)
  CHECK(float_to_bfloat16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie -> even (up)
  CHECK(float_to_bfloat16(std::bit_cast<float>(0x3f808001u)) == 0x3f81);  // above the tie
  CHECK(float_to_bfloat16(std::bit_cast<float>(0x3f807fffu)) == 0x3f80);  // below the tie
  CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds to infinity
  CHECK(float_to_bfloat16(-0.f) == 0x8000);
  CHECK(float_to_bfloat16(std::numeric_limits<float>::infinity()) == 0x7f80);
  // NaNs stay NaN, including a signalling NaN whose payload is all in the low bits.
  for (uint32_t bits : {0x7fc00000u, 0x7f800001u, 0xffffffffu}) {
    CAPTURE(bits);
    uint16_t b = float_to_bfloat16(std::bit_cast<float>(bits));
    CHECK(std::isnan(bfloat16_to_float(b)));
  }
  for (uint32_t b = 0; b <= 0xffff; ++b) {
    uint16_t h = static_cast<uint16_t>(b);
    float f = bfloat16_to_float(h);
    if (std::isnan(f)) {
      REQUIRE(std::isnan(bfloat16_to_float(float_to_bfloat16(f))));
    } else {
      REQUIRE(float_to_bfloat16(f) == h);
    }
  }
}

TEST_CASE("16-bit floats in tensors: set_from_double / get_as_double / cast use the same conversions") {
  Tensor h(DataType::Float16, {3});
  h.set_from_double(0, 1.0);
  h.set_from_double(1, 65520.0);
  h.set_from_double(2, 0.1);
  CHECK(h.data<uint16_t>()[0] == 0x3c00);
  CHECK(h.data<uint16_t>()[1] == 0x7c00);
  CHECK(h.data<uint16_t>()[2] == 0x2e66);
  Tensor f = h.cast(DataType::Float32);
  CHECK(f.data<float>()[2] == 0.0999755859375f);
  Tensor bf = f.cast(DataType::BFloat16);
  CHECK(bf.data<uint16_t>()[0] == 0x3f80);
  CHECK(bf.data<uint16_t>()[1] == 0x7f80);
}

// Every finite half and bfloat16 against values computed from their fields, and the
// rounding of every midpoint between neighbours (ties to even) and of the floats just
// beside it. These conversions (graph/float16.h) are compiled for the device too: the
// cuda kernels round --precision bf16/fp16 inputs with the same code.
TEST_CASE("half and bfloat16: every value, every midpoint between neighbours") {
  auto half_value = [](uint32_t h) {  // from the fields, not from the bit layout of float
    const int e = static_cast<int>(h >> 10), m = static_cast<int>(h & 0x3ff);
    return e == 0 ? std::ldexp(static_cast<float>(m), -24) : std::ldexp(static_cast<float>(1024 + m), e - 25);
  };
  auto bf16_value = [](uint32_t b) {
    const int e = static_cast<int>(b >> 7), m = static_cast<int>(b & 0x7f);
    return e == 0 ? std::ldexp(static_cast<float>(m), -133) : std::ldexp(static_cast<float>(128 + m), e - 134);
  };
  const float inf = std::numeric_limits<float>::infinity();
  size_t wrong = 0;
  for (uint32_t h = 0; h <= 0x7bff; ++h) {
    const float v = half_value(h);
    const auto hb = static_cast<uint16_t>(h);
    wrong += half_to_float(hb) != v || float_to_half(v) != hb || float_to_half(-v) != (hb | 0x8000);
    const float next = h < 0x7bff ? half_value(h + 1) : 65536.f;  // past the largest half: Inf
    const uint16_t up = h < 0x7bff ? static_cast<uint16_t>(h + 1) : 0x7c00;
    const float mid = v + (next - v) / 2;  // exact: 12 significant bits
    wrong += float_to_half(mid) != ((h & 1) ? up : hb);
    wrong += float_to_half(std::nextafter(mid, 0.f)) != hb || float_to_half(std::nextafter(mid, inf)) != up;
  }
  CHECK(wrong == 0);
  wrong = 0;
  for (uint32_t b = 0; b <= 0x7f7f; ++b) {
    const float v = bf16_value(b);
    const auto bb = static_cast<uint16_t>(b);
    wrong += bfloat16_to_float(bb) != v || float_to_bfloat16(v) != bb || float_to_bfloat16(-v) != (bb | 0x8000);
    const float next = b < 0x7f7f ? bf16_value(b + 1) : 0.f;
    if (b == 0x7f7f) continue;             // the midpoint above the largest bf16 is 2^128: not a float
    const float mid = v + (next - v) / 2;  // exact, and no overflow at the top
    const auto up = static_cast<uint16_t>(b + 1);
    wrong += float_to_bfloat16(mid) != ((b & 1) ? up : bb);
    wrong += float_to_bfloat16(std::nextafter(mid, 0.f)) != bb || float_to_bfloat16(std::nextafter(mid, inf)) != up;
  }
  CHECK(wrong == 0);
  CHECK(float_to_bfloat16(std::numeric_limits<float>::max()) == 0x7f80);  // rounds past the largest: Inf
  CHECK(std::isnan(bfloat16_to_float(float_to_bfloat16(std::numeric_limits<float>::quiet_NaN()))));
  CHECK(std::isnan(half_to_float(float_to_half(std::numeric_limits<float>::quiet_NaN()))));
}
