// Dataset readers: IDX (raw and gzipped), CIFAR-10 and CIFAR-100 binaries written
// here byte by byte, every bad-file case as a BadInput naming the file, and the
// Debian Fashion-MNIST files when installed; image folders (JPEG/PNG decoding and
// torchvision's transforms) and npz arrays.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

// clang-format off
#include <jpeglib.h>  // after <cstdio>: it needs FILE and size_t
// clang-format on
#include <png.h>

#include "datasets/dataset.h"
#include "datasets/image.h"
#include "datasets/pipeline.h"
#include "graph/error.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace trainrt;

namespace {

using trainrt::test::TempDir;

using Bytes = std::string;

void put_be32(Bytes& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<char>((v >> s) & 0xff));
}

Bytes gzip(const Bytes& raw) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  Bytes out(deflateBound(&z, raw.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
  z.avail_in = static_cast<uInt>(raw.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write(const std::string& path, const Bytes& b) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary).write(b.data(), static_cast<std::streamsize>(b.size()));
}

// n images of rows x cols, pixel (i, y, x) = (i*50 + y*cols + x) % 256.
Bytes idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < rows * cols; ++p) b.push_back(static_cast<char>((i * 50 + p) % 256));
  return b;
}

Bytes idx_labels(const std::vector<int>& labels, uint32_t magic = 0x801) {
  Bytes b;
  put_be32(b, magic);
  put_be32(b, static_cast<uint32_t>(labels.size()));
  for (int l : labels) b.push_back(static_cast<char>(l));
  return b;
}

// A CIFAR record: label byte(s), then 3072 pixels with (c, y, x) = (seed + c*7 + y*32 + x) % 256.
Bytes cifar_record(std::vector<int> labels, int seed) {
  Bytes b;
  for (int l : labels) b.push_back(static_cast<char>(l));
  for (int c = 0; c < 3; ++c)
    for (int p = 0; p < 1024; ++p) b.push_back(static_cast<char>((seed + c * 7 + p) % 256));
  return b;
}

// Runs f, expects a BadInput whose message starts with `file` and contains `what`.
void expect_bad(const std::function<void()>& f, const std::string& file, const std::string& what) {
  try {
    f();
    FAIL("no error; expected '" << what << "' for " << file);
  } catch (const Error& e) {
    INFO(e.what());
    CHECK(e.kind() == ErrorKind::BadInput);
    CHECK(std::string(e.what()).rfind(file + ": ", 0) == 0);
    CHECK(std::string(e.what()).find(what) != std::string::npos);
    CHECK(std::string(e.what()).find('\n') == std::string::npos);
  }
}

}  // namespace

TEST_CASE("IDX images and labels read back exactly, raw and gzipped") {
  TempDir dir;
  write(dir.file("train-images-idx3-ubyte"), idx_images(3, 2, 3));
  write(dir.file("train-labels-idx1-ubyte"), idx_labels({0, 9, 5}));
  write(dir.file("t10k-images-idx3-ubyte.gz"), gzip(idx_images(2, 4, 4)));
  write(dir.file("t10k-labels-idx1-ubyte.gz"), gzip(idx_labels({7, 1})));

  Tensor raw = read_idx_images(dir.file("train-images-idx3-ubyte"), 1 << 20);
  CHECK(raw.dtype() == DataType::UInt8);
  CHECK(raw.dims() == std::vector<int64_t>{3, 1, 2, 3});
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t p = 0; p < 6; ++p) CHECK(raw.data<uint8_t>()[i * 6 + p] == (i * 50 + p) % 256);

  DatasetOptions o;
  o.name = "mnist";
  o.data_dir = dir.path.string();
  Dataset train = load_dataset(o);
  CHECK(train.size() == 3);
  CHECK(train.classes == 10);
  CHECK(train.labels.data<int64_t>()[0] == 0);
  CHECK(train.labels.data<int64_t>()[1] == 9);
  CHECK(train.labels.data<int64_t>()[2] == 5);
  CHECK(train.mean.size() == 1);
  CHECK(train.source == dir.file("train-images-idx3-ubyte"));

  o.name = "fashion-mnist";
  o.train = false;
  Dataset test = load_dataset(o);  // the .gz files
  CHECK(test.images.dims() == std::vector<int64_t>{2, 1, 4, 4});
  CHECK(test.image(1)[15] == (50 + 15) % 256);
  CHECK(test.label(0) == 7);
  CHECK(test.label(1) == 1);
  CHECK(test.mean[0] == doctest::Approx(0.2860));
  CHECK(test.std[0] == doctest::Approx(0.3530));

  o.limit = 1;
  Dataset one = load_dataset(o);
  CHECK(one.images.dims() == std::vector<int64_t>{1, 1, 4, 4});
  CHECK(one.labels.dims() == std::vector<int64_t>{1});
  CHECK(one.label(0) == 7);
}

TEST_CASE("gzip: concatenated members are one stream, corrupt and truncated data are errors") {
  TempDir dir;
  Bytes raw = idx_images(2, 3, 3);
  write(dir.file("two.gz"), gzip(raw.substr(0, 10)) + gzip(raw.substr(10)));
  CHECK(read_maybe_gzip(dir.file("two.gz"), 1 << 20) == raw);

  Bytes gz = gzip(raw);
  write(dir.file("cut.gz"), gz.substr(0, gz.size() / 2));
  expect_bad([&] { read_maybe_gzip(dir.file("cut.gz"), 1 << 20); }, dir.file("cut.gz"), "truncated gzip");
  Bytes bad = gz;
  for (size_t i = 10; i < bad.size() - 8; ++i) bad[i] = static_cast<char>(0xff);
  write(dir.file("bad.gz"), bad);
  expect_bad([&] { read_maybe_gzip(dir.file("bad.gz"), 1 << 20); }, dir.file("bad.gz"), "corrupt gzip");
  write(dir.file("tail.gz"), gz + "xyz");
  expect_bad([&] { read_maybe_gzip(dir.file("tail.gz"), 1 << 20); }, dir.file("tail.gz"), "after the end");
  // A small file that inflates past the limit (a "gzip bomb") stops at the limit.
  write(dir.file("bomb.gz"), gzip(Bytes(1 << 16, '\0')));
  expect_bad([&] { read_maybe_gzip(dir.file("bomb.gz"), 1000); }, dir.file("bomb.gz"), "more than the limit of 1000");
  write(dir.file("exact.gz"), gzip(Bytes(1000, 'a')));
  CHECK(read_maybe_gzip(dir.file("exact.gz"), 1000) == Bytes(1000, 'a'));
  expect_bad([&] { read_maybe_gzip(dir.file("exact.gz"), 999); }, dir.file("exact.gz"), "more than the limit of 999");
}

TEST_CASE("IDX bad files are BadInput errors naming the file") {
  TempDir dir;
  const std::string img = dir.file("i"), lab = dir.file("l");
  auto images = [&](const Bytes& b) {
    write(img, b);
    return [p = img] { read_idx_images(p, 1 << 20); };
  };
  auto labels = [&](const Bytes& b) {
    write(lab, b);
    return [p = lab] { read_idx_labels(p, 10, 1 << 20); };
  };
  SUBCASE("bad magic") {
    expect_bad(images(idx_images(2, 2, 2, 0x801)), img, "bad magic 0x00000801");
    expect_bad(labels(idx_labels({1}, 0x803)), lab, "bad magic 0x00000803");
    expect_bad(images(gzip(idx_images(2, 2, 2, 0x08030000))), img, "bad magic");
  }
  SUBCASE("header too short") {
    expect_bad(images(Bytes("\0\0\x08\x03\0\0", 6)), img, "too short");
    expect_bad(labels(Bytes()), lab, "too short");
  }
  SUBCASE("truncated") {
    Bytes b = idx_images(3, 4, 4);
    expect_bad(images(b.substr(0, b.size() - 1)), img, "truncated");
    expect_bad(images(gzip(b.substr(0, b.size() - 16))), img, "truncated");
    Bytes l = idx_labels({1, 2, 3});
    expect_bad(labels(l.substr(0, l.size() - 1)), lab, "truncated");
  }
  SUBCASE("extra bytes") {
    expect_bad(images(idx_images(1, 2, 2) + "x"), img, "extra bytes");
    expect_bad(labels(idx_labels({1}) + "x"), lab, "extra bytes");
  }
  SUBCASE("absurd header: refused against the data actually present") {
    Bytes b;
    put_be32(b, 0x803);
    put_be32(b, 0xffffffff);
    put_be32(b, 0xffffffff);
    put_be32(b, 0xffffffff);
    b += "0123456789";
    expect_bad(images(b), img, "header says 4294967295 images of 4294967295x4294967295");
    expect_bad(images(idx_images(0, 28, 28)), img, "zero dimension");
    Bytes l;
    put_be32(l, 0x801);
    put_be32(l, 0xffffffff);
    expect_bad(labels(l), lab, "header says 4294967295 labels");
  }
  SUBCASE("label out of range") { expect_bad(labels(idx_labels({1, 10, 2})), lab, "label 10 at index 1"); }
  SUBCASE("file over the size limit") {
    write(img, idx_images(4, 8, 8));
    expect_bad([&] { read_idx_images(img, 64); }, img, "over the limit of 64");
  }
}

TEST_CASE("IDX dataset: count mismatch, missing files, unknown names") {
  TempDir dir;
  DatasetOptions o;
  o.name = "fashion-mnist";
  o.data_dir = dir.path.string();
  expect_bad([&] { load_dataset(o); }, dir.file("train-images-idx3-ubyte.gz"), "file not found");
  write(dir.file("train-images-idx3-ubyte.gz"), gzip(idx_images(3, 2, 2)));
  expect_bad([&] { load_dataset(o); }, dir.file("train-labels-idx1-ubyte.gz"), "file not found");
  write(dir.file("train-labels-idx1-ubyte"), idx_labels({1, 2}));
  expect_bad([&] { load_dataset(o); }, dir.file("train-images-idx3-ubyte.gz"),
             "3 images but " + dir.file("train-labels-idx1-ubyte") + " has 2 labels");
  o.data_dir = dir.file("nope");
  expect_bad([&] { load_dataset(o); }, dir.file("nope"), "data folder not found");
  o.name = "imagenet";
  expect_bad([&] { load_dataset(o); }, "--dataset", "unknown dataset 'imagenet'");
  o.name = "cifar10";
  o.data_dir = "";
  expect_bad([&] { load_dataset(o); }, "--data-dir", "required");
}

TEST_CASE("CIFAR-10 binary batches, from the folder or its cifar-10-batches-bin subfolder") {
  TempDir dir;
  const std::string sub = dir.file("cifar-10-batches-bin");
  for (int f = 1; f <= 5; ++f)
    write(sub + "/data_batch_" + std::to_string(f) + ".bin",
          cifar_record({f}, f * 10) + cifar_record({9 - f}, f * 10 + 1));
  write(sub + "/test_batch.bin", cifar_record({3}, 100) + cifar_record({4}, 101) + cifar_record({0}, 102));

  DatasetOptions o;
  o.name = "cifar10";
  o.data_dir = dir.path.string();
  Dataset train = load_dataset(o);
  CHECK(train.images.dims() == std::vector<int64_t>{10, 3, 32, 32});
  CHECK(train.classes == 10);
  CHECK(train.mean == std::vector<float>{0.4914f, 0.4822f, 0.4465f});
  CHECK(train.std == std::vector<float>{0.2470f, 0.2435f, 0.2616f});
  for (int f = 1; f <= 5; ++f) {
    CHECK(train.label(2 * (f - 1)) == f);
    CHECK(train.label(2 * (f - 1) + 1) == 9 - f);
  }
  // Sample 7 = batch 4, record 1 (seed 41): channel 2, y 3, x 5.
  CHECK(train.image(7)[2 * 1024 + 3 * 32 + 5] == (41 + 14 + 3 * 32 + 5) % 256);

  o.train = false;
  Dataset test = load_dataset(o);
  CHECK(test.size() == 3);
  CHECK(test.label(2) == 0);
  CHECK(test.image(0)[0] == 100);

  o.train = true;
  o.limit = 3;
  Dataset three = load_dataset(o);
  CHECK(three.size() == 3);
  CHECK(three.label(2) == 2);

  o.limit = 0;
  write(sub + "/data_batch_3.bin", cifar_record({1}, 0) + "x");
  expect_bad([&] { load_dataset(o); }, sub + "/data_batch_3.bin", "not a positive multiple of the 3073-byte record");
  write(sub + "/data_batch_3.bin", cifar_record({1}, 0) + cifar_record({10}, 0));
  expect_bad([&] { load_dataset(o); }, sub + "/data_batch_3.bin", "record 1: label 10 is out of range [0, 10)");
  fs::remove(sub + "/data_batch_3.bin");
  expect_bad([&] { load_dataset(o); }, sub + "/data_batch_3.bin", "file not found");
  fs::remove(sub + "/data_batch_1.bin");
  expect_bad([&] { load_dataset(o); }, dir.file("data_batch_1.bin"), "also looked in " + sub);
}

TEST_CASE("CIFAR-100 binary: fine labels, 100 classes") {
  TempDir dir;
  write(dir.file("train.bin"), cifar_record({19, 99}, 5) + cifar_record({0, 42}, 6));
  DatasetOptions o;
  o.name = "cifar100";
  o.data_dir = dir.path.string();
  Dataset d = load_dataset(o);
  CHECK(d.classes == 100);
  CHECK(d.images.dims() == std::vector<int64_t>{2, 3, 32, 32});
  CHECK(d.label(0) == 99);
  CHECK(d.label(1) == 42);
  CHECK(d.image(1)[1024] == 13);
  CHECK(d.mean == std::vector<float>{0.5071f, 0.4867f, 0.4408f});
  CHECK(d.std == std::vector<float>{0.2675f, 0.2565f, 0.2761f});

  write(dir.file("train.bin"), cifar_record({1, 100}, 0));
  expect_bad([&] { load_dataset(o); }, dir.file("train.bin"), "label 100 is out of range [0, 100)");
  write(dir.file("train.bin"), cifar_record({20, 1}, 0));
  expect_bad([&] { load_dataset(o); }, dir.file("train.bin"), "coarse label 20");
  write(dir.file("train.bin"), cifar_record({1, 1}, 0).substr(1));
  expect_bad([&] { load_dataset(o); }, dir.file("train.bin"), "3074-byte record");
  write(dir.file("train.bin"), "");
  expect_bad([&] { load_dataset(o); }, dir.file("train.bin"), "size 0");
  o.train = false;
  expect_bad([&] { load_dataset(o); }, dir.file("test.bin"), "file not found");
  write(dir.file("cifar-100-binary/test.bin"), cifar_record({1, 7}, 0));
  CHECK(load_dataset(o).label(0) == 7);
}

TEST_CASE("Debian Fashion-MNIST (dataset-fashion-mnist)") {
  const std::string dir = default_data_dir("fashion-mnist");
  if (!fs::exists(fs::path(dir) / "train-images-idx3-ubyte.gz")) {
    MESSAGE("skipped: " << dir << " not installed (apt-get install dataset-fashion-mnist)");
    return;
  }
  DatasetOptions o;  // defaults: fashion-mnist from the Debian folder
  Dataset train = load_dataset(o);
  CHECK(train.images.dims() == std::vector<int64_t>{60000, 1, 28, 28});
  const std::vector<int64_t> first_train = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  for (int64_t i = 0; i < 10; ++i) CHECK(train.label(i) == first_train[i]);
  int64_t sum = 0;
  for (int64_t p = 0; p < 784; ++p) sum += train.image(0)[p];
  CHECK(sum == 76247);
  o.train = false;
  Dataset test = load_dataset(o);
  CHECK(test.images.dims() == std::vector<int64_t>{10000, 1, 28, 28});
  const std::vector<int64_t> first_test = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
  for (int64_t i = 0; i < 10; ++i) CHECK(test.label(i) == first_test[i]);
}

// ---------------------------------------------------------------- image folders, npz
// Images are written here with libpng and libjpeg; geometry is checked against
// hand-computed values (also what PIL 9.4 / torchvision 0.14 give).

namespace {

// A PNG of width x height in any colour type / bit depth; `pixels` holds the packed
// rows as PNG stores them (rows of ceil(width*channels*depth/8) bytes).
Bytes make_png(int width, int height, int color_type, int depth, const Bytes& pixels,
               const std::vector<png_color>& palette = {}, bool interlace = false) {
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  Bytes out;
  png_set_write_fn(
      png, &out,
      [](png_structp p, png_bytep d, size_t n) {
        static_cast<Bytes*>(png_get_io_ptr(p))->append(reinterpret_cast<const char*>(d), n);
      },
      nullptr);
  png_set_IHDR(png, info, width, height, depth, color_type, interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (!palette.empty()) png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
  png_write_info(png, info);
  const size_t row = pixels.size() / static_cast<size_t>(height);
  std::vector<png_bytep> rows;
  for (int y = 0; y < height; ++y)
    rows.push_back(reinterpret_cast<png_bytep>(const_cast<char*>(pixels.data())) + static_cast<size_t>(y) * row);
  png_write_image(png, rows.data());
  png_write_end(png, nullptr);
  png_destroy_write_struct(&png, &info);
  return out;
}

// An RGB (components 3) or grayscale (1) JPEG at quality 100.
Bytes make_jpeg(int width, int height, int components, const Bytes& pixels) {
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&c, &buf, &size);
  c.image_width = static_cast<JDIMENSION>(width);
  c.image_height = static_cast<JDIMENSION>(height);
  c.input_components = components;
  c.in_color_space = components == 3 ? JCS_RGB : JCS_GRAYSCALE;
  jpeg_set_defaults(&c);
  jpeg_set_quality(&c, 100, TRUE);
  jpeg_start_compress(&c, TRUE);
  while (c.next_scanline < c.image_height) {
    JSAMPROW row = reinterpret_cast<JSAMPROW>(const_cast<char*>(pixels.data())) +
                   static_cast<size_t>(c.next_scanline) * width * components;
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  Bytes out(reinterpret_cast<const char*>(buf), size);
  std::free(buf);
  return out;
}

Bytes solid_rgb(int width, int height, uint8_t r, uint8_t g, uint8_t b) {
  Bytes p;
  for (int i = 0; i < width * height; ++i) p += {static_cast<char>(r), static_cast<char>(g), static_cast<char>(b)};
  return p;
}

// A .npy file: version 1.0 header padded to 64 bytes, then the data.
Bytes npy(const std::string& descr, const std::vector<int64_t>& shape, const Bytes& data) {
  std::string dims;
  for (int64_t d : shape) dims += std::to_string(d) + ", ";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': (" + dims + "), }";
  header += std::string(63 - (10 + header.size()) % 64, ' ') + "\n";
  Bytes b = "\x93NUMPY";
  b += {'\x01', '\x00', static_cast<char>(header.size() & 0xff), static_cast<char>(header.size() >> 8)};
  return b + header + data;
}

// Little-endian, `bytes` wide; bytes past the eighth are zero.
void put_le(Bytes& b, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) b.push_back(i < 8 ? static_cast<char>((v >> (8 * i)) & 0xff) : '\0');
}

// A zip of the members (name -> bytes), stored or raw-deflated, as numpy.savez writes it.
Bytes zip(const std::vector<std::pair<std::string, Bytes>>& members, bool deflated) {
  Bytes out, central;
  for (const auto& [name, raw] : members) {
    Bytes data = raw;
    if (deflated) {
      z_stream z{};
      REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
      data.assign(deflateBound(&z, raw.size()) + 16, '\0');
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(raw.data()));
      z.avail_in = static_cast<uInt>(raw.size());
      z.next_out = reinterpret_cast<Bytef*>(data.data());
      z.avail_out = static_cast<uInt>(data.size());
      REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
      data.resize(z.total_out);
      deflateEnd(&z);
    }
    const uint32_t crc = static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(raw.data()), raw.size()));
    const uint64_t offset = out.size();
    auto common = [&](Bytes& b) {
      put_le(b, 20, 2);                // version needed
      put_le(b, 0, 2);                 // flags
      put_le(b, deflated ? 8 : 0, 2);  // method
      put_le(b, 0, 4);                 // time, date
      put_le(b, crc, 4);
      put_le(b, data.size(), 4);
      put_le(b, raw.size(), 4);
      put_le(b, name.size(), 2);
      put_le(b, 0, 2);  // extra
    };
    put_le(out, 0x04034b50, 4);
    common(out);
    out += name + data;
    put_le(central, 0x02014b50, 4);
    put_le(central, 20, 2);  // version made by
    common(central);
    put_le(central, 0, 2 + 2 + 2 + 4);  // comment, disk, internal, external attributes
    put_le(central, offset, 4);
    central += name;
  }
  const uint64_t cd = out.size();
  out += central;
  put_le(out, 0x06054b50, 4);
  put_le(out, 0, 4);
  put_le(out, members.size(), 2);
  put_le(out, members.size(), 2);
  put_le(out, central.size(), 4);
  put_le(out, cd, 4);
  put_le(out, 0, 2);
  return out;
}

template <typename T>
Bytes raw_bytes(const std::vector<T>& v) {
  return Bytes(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// The pixel (y, x) of a decoded image.
std::vector<int> pixel(const Image& im, int64_t y, int64_t x) {
  const uint8_t* p = im.rgb.data() + (y * im.width + x) * 3;
  return {p[0], p[1], p[2]};
}

}  // namespace

TEST_CASE("PNG decoding: RGB, gray, palette, 16-bit, alpha and interlaced all become RGB 8-bit") {
  SUBCASE("RGB 8-bit, exact") {
    Bytes px;
    for (int i = 0; i < 6; ++i) px += {static_cast<char>(i * 40), static_cast<char>(i), static_cast<char>(255 - i)};
    const Image im = decode_png(reinterpret_cast<const uint8_t*>(make_png(3, 2, PNG_COLOR_TYPE_RGB, 8, px).data()),
                                make_png(3, 2, PNG_COLOR_TYPE_RGB, 8, px).size(), "a.png");
    REQUIRE(im.height == 2);
    REQUIRE(im.width == 3);
    CHECK(pixel(im, 1, 2) == std::vector<int>{200, 5, 250});
    CHECK(pixel(im, 0, 1) == std::vector<int>{40, 1, 254});
  }
  SUBCASE("gray 8-bit: R = G = B") {
    const Image im = decode_image(make_png(2, 1, PNG_COLOR_TYPE_GRAY, 8, Bytes{'\x07', '\xf0'}), "g.png");
    CHECK(pixel(im, 0, 0) == std::vector<int>{7, 7, 7});
    CHECK(pixel(im, 0, 1) == std::vector<int>{240, 240, 240});
  }
  SUBCASE("gray 1-bit expands to 0 and 255") {
    const Image im = decode_image(make_png(3, 1, PNG_COLOR_TYPE_GRAY, 1, Bytes{'\xa0'}), "b.png");  // 101
    CHECK(pixel(im, 0, 0) == std::vector<int>{255, 255, 255});
    CHECK(pixel(im, 0, 1) == std::vector<int>{0, 0, 0});
  }
  SUBCASE("palette") {
    const std::vector<png_color> pal{{10, 20, 30}, {200, 100, 0}};
    const Image im = decode_image(make_png(2, 1, PNG_COLOR_TYPE_PALETTE, 8, Bytes{'\x01', '\x00'}, pal), "p.png");
    CHECK(pixel(im, 0, 0) == std::vector<int>{200, 100, 0});
    CHECK(pixel(im, 0, 1) == std::vector<int>{10, 20, 30});
  }
  SUBCASE("16-bit RGB keeps the high byte") {
    const Bytes px{'\x12', '\x34', '\xab', '\xcd', '\x00', '\xff'};  // big-endian samples
    const Image im = decode_image(make_png(1, 1, PNG_COLOR_TYPE_RGB, 16, px), "w.png");
    CHECK(pixel(im, 0, 0) == std::vector<int>{0x12, 0xab, 0x00});
  }
  SUBCASE("RGBA and gray+alpha drop the alpha") {
    CHECK(pixel(decode_image(make_png(1, 1, PNG_COLOR_TYPE_RGBA, 8, Bytes{'\x01', '\x02', '\x03', '\x00'}), "a.png"), 0,
                0) == std::vector<int>{1, 2, 3});
    CHECK(pixel(decode_image(make_png(1, 1, PNG_COLOR_TYPE_GRAY_ALPHA, 8, Bytes{'\x09', '\x80'}), "a.png"), 0, 0) ==
          std::vector<int>{9, 9, 9});
  }
  SUBCASE("interlaced (Adam7)") {
    Bytes px;
    for (int i = 0; i < 9 * 9; ++i) px.push_back(static_cast<char>(i * 3));
    const Image im = decode_image(make_png(9, 9, PNG_COLOR_TYPE_GRAY, 8, px, {}, true), "i.png");
    for (int i = 0; i < 81; ++i) CHECK(pixel(im, i / 9, i % 9)[1] == i * 3);
  }
}

TEST_CASE("JPEG decoding: RGB and grayscale") {
  const Image rgb = decode_image(make_jpeg(16, 8, 3, solid_rgb(16, 8, 200, 100, 50)), "a.jpg");
  REQUIRE(rgb.height == 8);
  REQUIRE(rgb.width == 16);
  for (int64_t y = 0; y < 8; ++y)
    for (int64_t x = 0; x < 16; ++x) {
      const std::vector<int> p = pixel(rgb, y, x);
      CHECK(std::abs(p[0] - 200) <= 2);
      CHECK(std::abs(p[1] - 100) <= 2);
      CHECK(std::abs(p[2] - 50) <= 2);
    }
  const Image gray = decode_image(make_jpeg(4, 4, 1, Bytes(16, '\x55')), "g.jpeg");
  CHECK(pixel(gray, 3, 3) == std::vector<int>{0x55, 0x55, 0x55});
}

TEST_CASE("corrupt, truncated and non-image files are BadInput errors naming the file") {
  const Bytes jpg = make_jpeg(32, 32, 3, solid_rgb(32, 32, 1, 2, 3));
  const Bytes png = make_png(8, 8, PNG_COLOR_TYPE_RGB, 8, solid_rgb(8, 8, 1, 2, 3));
  auto decode = [](Bytes b) { return [b] { (void)decode_image(b, "dir/x.img"); }; };
  expect_bad(decode(jpg.substr(0, jpg.size() / 2)), "dir/x.img", "corrupt or truncated JPEG");
  expect_bad(decode(jpg.substr(0, 20)), "dir/x.img", "corrupt or truncated JPEG");
  expect_bad(decode(png.substr(0, png.size() - 20)), "dir/x.img", "corrupt or truncated PNG");
  Bytes bad_crc = png;
  bad_crc[20] ^= 0x40;  // inside IHDR: its CRC no longer matches
  expect_bad(decode(bad_crc), "dir/x.img", "corrupt or truncated PNG");
  Bytes bad_sof = jpg;
  for (size_t i = 2; i + 1 < bad_sof.size(); ++i)
    if (bad_sof[i] == '\xff' && bad_sof[i + 1] == '\xc0') {  // SOF0: precision 8 -> 3
      bad_sof[i + 4] = 3;
      break;
    }
  expect_bad(decode(bad_sof), "dir/x.img", "corrupt or truncated JPEG");
  expect_bad(decode("hello, not an image"), "dir/x.img", "not a JPEG or PNG image");
  expect_bad(decode(""), "dir/x.img", "empty file");
}

TEST_CASE("bilinear resampling matches PIL's (triangle filter, widened when shrinking)") {
  Image row;
  row.height = 1;
  row.width = 4;
  for (int v : {0, 100, 200, 40}) row.rgb.insert(row.rgb.end(), 3, static_cast<uint8_t>(v));
  Image out;
  resize_region(row, {0, 0, 1, 4}, 1, 2, out);  // PIL: [71, 117]
  CHECK(pixel(out, 0, 0)[0] == 71);
  CHECK(pixel(out, 0, 1)[0] == 117);
  resize_region(row, {0, 0, 1, 2}, 1, 4, out);  // the box [0, 100] grown: PIL [0, 25, 75, 100]
  CHECK(std::vector<int>{pixel(out, 0, 0)[0], pixel(out, 0, 1)[0], pixel(out, 0, 2)[0], pixel(out, 0, 3)[0]} ==
        std::vector<int>{0, 25, 75, 100});
  resize_region(row, {0, 1, 1, 2}, 1, 1, out);  // box [100, 200] to one pixel: the mean
  CHECK(pixel(out, 0, 0)[0] == 150);
  // Odd ratios, horizontally and vertically, bit-exact with PIL's fixed point.
  const std::vector<int> v{3, 250, 17, 99, 180, 64, 7};
  Image wide, tall;
  wide.height = tall.width = 1;
  wide.width = tall.height = 7;
  for (int x : v) {
    wide.rgb.insert(wide.rgb.end(), 3, static_cast<uint8_t>(x));
    tall.rgb.insert(tall.rgb.end(), 3, static_cast<uint8_t>(x));
  }
  auto values = [](const Image& im) {
    std::vector<int> r;
    for (size_t i = 0; i < im.rgb.size(); i += 3) r.push_back(im.rgb[i]);
    return r;
  };
  resize_region(wide, {0, 0, 1, 7}, 1, 3, out);
  CHECK(values(out) == std::vector<int>{112, 106, 68});
  resize_region(wide, {0, 0, 1, 7}, 1, 5, out);
  CHECK(values(out) == std::vector<int>{85, 121, 99, 128, 26});
  resize_region(tall, {0, 0, 7, 1}, 3, 1, out);
  CHECK(values(out) == std::vector<int>{112, 106, 68});
}

TEST_CASE("torchvision's crop geometry: RandomResizedCrop, its fallback, Resize and CenterCrop") {
  auto draws = [](std::vector<double> u) { return [u, i = size_t{0}]() mutable { return u[i++ % u.size()]; }; };
  // area 10000 * (0.08 + 0.92*0.5) = 5400, aspect exp(0) = 1: 73 x 73 (sqrt 73.48), offsets U*28.
  CHECK(random_resized_crop(100, 100, draws({0.5, 0.5, 0.0, 0.999})) == CropBox{0, 27, 73, 73});
  // A 10 x 1000 strip never fits a near-square box: the centre crop with aspect 4/3, 10 x round(13.33).
  CHECK(random_resized_crop(10, 1000, draws({0.99, 0.5})) == CropBox{0, 493, 10, 13});
  // A 1000 x 10 column: width 10, height round(10 / (3/4)) = 13.
  CHECK(random_resized_crop(1000, 10, draws({0.99, 0.5})) == CropBox{493, 0, 13, 10});
  CHECK(resize_shorter(375, 500, 256) == std::pair<int64_t, int64_t>{256, 341});  // torchvision: (341, 256) as W,H
  CHECK(resize_shorter(500, 375, 256) == std::pair<int64_t, int64_t>{341, 256});
  CHECK(center_crop(256, 341, 224) == CropBox{16, 58, 224, 224});  // round(58.5) = 58, half to even
  // Validation of a 40 x 40 image at 32: resized to round(32/0.875) = 37, cropped at round(2.5) = 2.
  Image im;
  im.height = im.width = 40;
  im.rgb.assign(40 * 40 * 3, 77);
  const Image v = eval_transform(im, 32);
  CHECK(v.height == 32);
  CHECK(v.width == 32);
  CHECK(pixel(v, 31, 31) == std::vector<int>{77, 77, 77});
}

TEST_CASE("npz: stored and deflated members, dtypes, the validation split, bad files") {
  TempDir dir;
  const std::vector<float> x{0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f, 9.f, 10.f, 11.f};
  const std::vector<int64_t> y{2, 0, 1};
  const std::vector<double> xv{-1.0, 0.5, 2.0, 4.0};
  const std::vector<uint8_t> yv{3};
  for (bool deflated : {false, true}) {
    CAPTURE(deflated);
    const std::string path = dir.file(deflated ? "c.npz" : "s.npz");
    write(path, zip({{"x.npy", npy("<f4", {3, 2, 2}, raw_bytes(x))},
                     {"y.npy", npy("<i8", {3}, raw_bytes(y))},
                     {"x_val.npy", npy("<f8", {1, 2, 2}, raw_bytes(xv))},
                     {"y_val.npy", npy("|u1", {1}, raw_bytes(yv))}},
                    deflated));
    DatasetOptions o;
    o.name = "npz";
    o.data_dir = path;
    const Dataset train = load_dataset(o);
    CHECK(train.size() == 3);
    CHECK(train.sample_dims() == std::vector<int64_t>{2, 2});
    CHECK(train.classes == 4);  // y_val's 3 counts
    CHECK(train.images.data<float>()[11] == 11.f);
    CHECK(train.label(0) == 2);
    o.train = false;
    const Dataset val = load_dataset(o);
    CHECK(val.size() == 1);
    CHECK(val.images.dtype() == DataType::Float32);
    CHECK(val.images.data<float>()[1] == 0.5f);
    CHECK(val.label(0) == 3);
    CHECK(val.classes == 4);
  }
  // Without x_val/y_val the test split is x/y; uint8 samples stay uint8.
  const std::string plain = dir.file("u.npz");
  write(plain, zip({{"x.npy", npy("|u1", {2, 3}, Bytes{'\x01', '\x02', '\x03', '\x04', '\x05', '\x06'})},
                    {"y.npy", npy("<i4", {2}, raw_bytes(std::vector<int32_t>{1, 0}))}},
                   false));
  DatasetOptions o;
  o.name = "npz";
  o.data_dir = plain;
  o.train = false;
  const Dataset d = load_dataset(o);
  CHECK(d.size() == 2);
  CHECK(d.images.dtype() == DataType::UInt8);
  CHECK(d.classes == 2);

  auto load = [&](const Bytes& file) {
    write(dir.file("bad.npz"), file);
    DatasetOptions b;
    b.name = "npz";
    b.data_dir = dir.file("bad.npz");
    return [b] { (void)load_dataset(b); };
  };
  const Bytes xs = npy("<f4", {3, 2, 2}, raw_bytes(x)), ys = npy("<i8", {3}, raw_bytes(y));
  expect_bad(load("not a zip at all, just some text"), dir.file("bad.npz"), "not a .npz (zip) file");
  expect_bad(load(zip({{"x.npy", xs}}, false)), dir.file("bad.npz"), "has no array 'y'");
  expect_bad(load(zip({{"x.npy", xs}, {"y.npy", npy("<i8", {2}, raw_bytes(std::vector<int64_t>{0, 1}))}}, false)),
             dir.file("bad.npz:y"), "labels must have shape [3]");
  expect_bad(load(zip({{"x.npy", xs.substr(0, xs.size() - 4)}, {"y.npy", ys}}, false)), dir.file("bad.npz:x.npy"),
             "needs 48 bytes");
  expect_bad(load(zip({{"x.npy", npy("<c8", {3}, Bytes(24, '\0'))}, {"y.npy", ys}}, false)), dir.file("bad.npz:x.npy"),
             "unsupported dtype '<c8'");
  expect_bad(load(zip({{"x.npy", xs}, {"y.npy", npy("<f4", {3}, raw_bytes(std::vector<float>{0, 1, 2}))}}, false)),
             dir.file("bad.npz:y"), "labels must be integers");
  Bytes cut = zip({{"x.npy", xs}, {"y.npy", ys}}, true);
  expect_bad(load(cut.substr(0, cut.size() / 2)), dir.file("bad.npz"), "not a .npz (zip) file");
}

TEST_CASE("npz beyond images: token ids [N,T], audio [N,C,L], video [N,C,D,H,W], batched as they are") {
  TempDir dir;
  const std::vector<int64_t> y{1, 0, 2, 1};
  auto load = [&](const std::string& name, const Bytes& x, const Bytes& labels) {
    write(dir.file(name), zip({{"x.npy", x}, {"y.npy", labels}}, true));
    DatasetOptions o;
    o.name = "npz";
    o.data_dir = dir.file(name);
    return load_dataset(o);
  };
  const Bytes ys = npy("<i8", {4}, raw_bytes(y));
  std::vector<int64_t> ids(4 * 5);
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i * 7 % 50);
  const Dataset tok = load("tok.npz", npy("<i8", {4, 5}, raw_bytes(ids)), ys);
  CHECK(tok.images.dtype() == DataType::Int64);
  CHECK(tok.sample_dims() == std::vector<int64_t>{5});
  CHECK(tok.classes == 3);
  // int32 ids are widened to int64.
  std::vector<int32_t> ids32(ids.begin(), ids.end());
  const Dataset tok32 = load("tok32.npz", npy("<i4", {4, 5}, raw_bytes(ids32)), ys);
  CHECK(tok32.images.dtype() == DataType::Int64);
  CHECK(tok32.images.data<int64_t>()[19] == ids[19]);
  // The pipeline batches token ids unnormalised, as int64, in the epoch's order.
  PipelineOptions po = eval_options(3);
  BatchStream s(tok, po);
  auto b = s.next();
  REQUIRE(b);
  CHECK(b->images.dtype() == DataType::Int64);
  CHECK(b->images.dims() == std::vector<int64_t>{3, 5});
  CHECK(b->images.data<int64_t>()[7] == ids[7]);
  CHECK(b->labels.data<int64_t>()[2] == 2);
  // Shuffled with augmentation asked for: refused (no augmentation for non-image data).
  PipelineOptions aug = po;
  aug.augment = true;
  expect_bad([&] { BatchStream bad(tok, aug); }, dir.file("tok.npz"), "augmentation (flip + crop) needs uint8 images");
  Dataset normalised = tok;
  normalised.mean = {0.5f};
  expect_bad([&] { BatchStream bad(normalised, po); }, dir.file("tok.npz"), "--mean/--std do not apply");

  // Float arrays of any rank: audio N,C,L and video N,C,D,H,W, batched as float32 N x sample.
  std::vector<float> audio(4 * 2 * 6), video(4 * 1 * 2 * 3 * 3);
  for (size_t i = 0; i < audio.size(); ++i) audio[i] = static_cast<float>(i) * 0.5f;
  for (size_t i = 0; i < video.size(); ++i) video[i] = static_cast<float>(i);
  const Dataset a = load("audio.npz", npy("<f4", {4, 2, 6}, raw_bytes(audio)), ys);
  CHECK(a.sample_dims() == std::vector<int64_t>{2, 6});
  const Dataset v = load("video.npz", npy("<f4", {4, 1, 2, 3, 3}, raw_bytes(video)), ys);
  CHECK(v.sample_dims() == std::vector<int64_t>{1, 2, 3, 3});
  BatchStream sv(v, eval_options(4));
  auto bv = sv.next();
  REQUIRE(bv);
  CHECK(bv->images.dims() == std::vector<int64_t>{4, 1, 2, 3, 3});
  CHECK(bv->images.data<float>()[71] == 71.f);

  // Errors: an unsigned or bool x, a sample-less x, a truncated file, labels out of range.
  expect_bad(
      [&] {
        load("u2.npz", npy("<u2", {4, 5}, Bytes(40, '\0')), ys);
      },
      dir.file("u2.npz:x"), "int8..int64 (token ids), got uint16");
  expect_bad([&] { load("r1.npz", npy("<i8", {4}, raw_bytes(y)), ys); }, dir.file("r1.npz:x"),
             "must be N x ... with N >= 1 and a sample shape");
  const Bytes good = zip({{"x.npy", npy("<i8", {4, 5}, raw_bytes(ids))}, {"y.npy", ys}}, true);
  write(dir.file("cut.npz"), good.substr(0, good.size() - 30));
  DatasetOptions o;
  o.name = "npz";
  o.data_dir = dir.file("cut.npz");
  expect_bad([&] { (void)load_dataset(o); }, dir.file("cut.npz"), "");
  Dataset wrong = tok;
  wrong.classes = 2;  // label 2 of sample 2 is out of range
  BatchStream sw(wrong, eval_options(4));
  expect_bad([&] { (void)sw.next(); }, dir.file("tok.npz"), "sample 2: label 2 is out of range [0, 2)");
}

TEST_CASE("image folder: torchvision's class order, file order, extensions, and bad folders") {
  TempDir dir;
  const Bytes png = make_png(4, 4, PNG_COLOR_TYPE_RGB, 8, solid_rgb(4, 4, 9, 9, 9));
  for (const char* f : {"train/dog/b.png", "train/dog/A.PNG", "train/dog/sub/a.jpg", "train/dog/z.jpeg",
                        "train/cat/1.png", "train/ant/x.Png", "val/dog/v.png", "val/ant/w.png"})
    write(dir.file(f), png);
  write(dir.file("train/dog/notes.txt"), "not an image");
  DatasetOptions o;
  o.name = "imagefolder";
  o.data_dir = dir.path.string();
  o.image_size = 16;
  const Dataset d = load_dataset(o);
  CHECK(d.class_names == std::vector<std::string>{"ant", "cat", "dog"});
  CHECK(d.classes == 3);
  CHECK(d.sample_dims() == std::vector<int64_t>{3, 16, 16});
  REQUIRE(d.size() == 6);
  // os.walk order: the class folder's files sorted (upper case first), then its subfolders'.
  const std::vector<std::string> want{"train/ant/x.Png", "train/cat/1.png",  "train/dog/A.PNG",
                                      "train/dog/b.png", "train/dog/z.jpeg", "train/dog/sub/a.jpg"};
  for (size_t i = 0; i < want.size(); ++i) CHECK(d.files[i] == dir.file(want[i]));
  CHECK(std::vector<int64_t>(d.labels.data<int64_t>(), d.labels.data<int64_t>() + 6) ==
        std::vector<int64_t>{0, 1, 2, 2, 2, 2});
  o.train = false;
  const Dataset v = load_dataset(o);
  REQUIRE(v.size() == 2);
  CHECK(v.label(0) == 0);  // val/ant
  CHECK(v.label(1) == 2);  // val/dog: the training index, not val/'s position
  o.limit = 1;
  CHECK(load_dataset(o).size() == 1);

  SUBCASE("a val class that train lacks") {
    write(dir.file("val/emu/e.png"), png);
    expect_bad([&] { (void)load_dataset(o); }, dir.file("val/emu"), "class 'emu' is not a class of");
  }
  SUBCASE("an empty class folder") {
    fs::create_directories(dir.path / "train" / "bee");
    o.train = true;
    expect_bad([&] { (void)load_dataset(o); }, dir.file("train/bee"), "class folder has no images");
  }
  SUBCASE("no train folder") {
    fs::remove_all(dir.path / "train");
    expect_bad([&] { (void)load_dataset(o); }, dir.file("train"), "folder not found");
  }
}

TEST_CASE("image folder batches: decoded in the pipeline, the eval transform exact, augmentation seeded") {
  TempDir dir;
  // Solid colours survive every crop and resize unchanged.
  write(dir.file("train/a/1.png"), make_png(40, 30, PNG_COLOR_TYPE_RGB, 8, solid_rgb(40, 30, 255, 0, 51)));
  write(dir.file("train/b/2.png"), make_png(20, 50, PNG_COLOR_TYPE_GRAY, 8, Bytes(1000, '\x66')));
  Bytes grad;  // a horizontal gradient shows flips and crops
  for (int y = 0; y < 24; ++y)
    for (int x = 0; x < 48; ++x) grad += {static_cast<char>(x * 5), static_cast<char>(y * 10), '\0'};
  write(dir.file("train/b/3.png"), make_png(48, 24, PNG_COLOR_TYPE_RGB, 8, grad));
  write(dir.file("train/b/4.png"), "truncated");
  DatasetOptions o;
  o.name = "imagefolder";
  o.data_dir = dir.path.string();
  o.image_size = 8;
  o.limit = 3;
  Dataset d = load_dataset(o);
  PipelineOptions eval = eval_options(3);
  {
    BatchStream s(d, eval);
    auto b = s.next();
    REQUIRE(b);
    REQUIRE(b->images.dims() == std::vector<int64_t>{3, 3, 8, 8});
    const float* x = b->images.data<float>();
    CHECK(x[0] == doctest::Approx((1.f - 0.485f) / 0.229f));
    CHECK(x[64 + 5] == doctest::Approx((0.f - 0.456f) / 0.224f));
    CHECK(x[128 + 63] == doctest::Approx((0.2f - 0.406f) / 0.225f));
    CHECK(x[192 + 100] == doctest::Approx((0.4f - 0.456f) / 0.224f));
    CHECK(b->labels.data<int64_t>()[2] == 1);
  }
  PipelineOptions train;
  train.batch_size = 3;
  train.augment = true;
  train.seed = 5;
  auto batch = [&](uint64_t seed, int64_t epoch) {
    train.seed = seed;
    train.epoch = epoch;
    BatchStream s(d, train);
    return *s.next();
  };
  const Batch a = batch(5, 0), again = batch(5, 0), other = batch(6, 0);
  auto same = [](const Batch& p, const Batch& q) {
    return p.samples == q.samples &&
           std::equal(p.images.data<float>(), p.images.data<float>() + p.images.numel(), q.images.data<float>());
  };
  CHECK(same(a, again));
  CHECK(!same(a, other));
  // A sample's augmented pixels are prepare_file_sample's with the same (seed, epoch, index).
  std::vector<float> one(3 * 8 * 8);
  prepare_file_sample(d, a.samples[0], true, 5, 0, one.data());
  CHECK(std::equal(one.begin(), one.end(), a.images.data<float>()));
  // The file that is not an image fails its batch with one line naming it.
  o.limit = 0;
  d = load_dataset(o);
  expect_bad(
      [&] {
        BatchStream s(d, eval_options(4));
        while (s.next()) {
        }
      },
      dir.file("train/b/4.png"), "not a JPEG or PNG image");
}
