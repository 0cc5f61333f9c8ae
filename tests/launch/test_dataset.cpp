// Dataset readers: IDX (raw and gzipped), CIFAR-10 and CIFAR-100 binaries written
// here byte by byte, every bad-file case as a BadInput naming the file, and the
// Debian Fashion-MNIST files when installed.
#include <doctest/doctest.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "graph/error.h"
#include "launch/dataset.h"

namespace fs = std::filesystem;
using namespace trainrt;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    static std::atomic<int> counter{0};
    path = fs::temp_directory_path() /
           ("trainrt_test_dataset_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& name) const { return (path / name).string(); }
};

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
  write(dir / "train-images-idx3-ubyte", idx_images(3, 2, 3));
  write(dir / "train-labels-idx1-ubyte", idx_labels({0, 9, 5}));
  write(dir / "t10k-images-idx3-ubyte.gz", gzip(idx_images(2, 4, 4)));
  write(dir / "t10k-labels-idx1-ubyte.gz", gzip(idx_labels({7, 1})));

  Tensor raw = read_idx_images(dir / "train-images-idx3-ubyte", 1 << 20);
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
  CHECK(train.source == dir / "train-images-idx3-ubyte");

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
  write(dir / "two.gz", gzip(raw.substr(0, 10)) + gzip(raw.substr(10)));
  CHECK(read_maybe_gzip(dir / "two.gz", 1 << 20) == raw);

  Bytes gz = gzip(raw);
  write(dir / "cut.gz", gz.substr(0, gz.size() / 2));
  expect_bad([&] { read_maybe_gzip(dir / "cut.gz", 1 << 20); }, dir / "cut.gz", "truncated gzip");
  Bytes bad = gz;
  for (size_t i = 10; i < bad.size() - 8; ++i) bad[i] = static_cast<char>(0xff);
  write(dir / "bad.gz", bad);
  expect_bad([&] { read_maybe_gzip(dir / "bad.gz", 1 << 20); }, dir / "bad.gz", "corrupt gzip");
  write(dir / "tail.gz", gz + "xyz");
  expect_bad([&] { read_maybe_gzip(dir / "tail.gz", 1 << 20); }, dir / "tail.gz", "after the end");
  // A small file that inflates past the limit (a "gzip bomb") stops at the limit.
  write(dir / "bomb.gz", gzip(Bytes(1 << 16, '\0')));
  expect_bad([&] { read_maybe_gzip(dir / "bomb.gz", 1000); }, dir / "bomb.gz", "more than the limit of 1000");
  write(dir / "exact.gz", gzip(Bytes(1000, 'a')));
  CHECK(read_maybe_gzip(dir / "exact.gz", 1000) == Bytes(1000, 'a'));
  expect_bad([&] { read_maybe_gzip(dir / "exact.gz", 999); }, dir / "exact.gz", "more than the limit of 999");
}

TEST_CASE("IDX bad files are BadInput errors naming the file") {
  TempDir dir;
  const std::string img = dir / "i", lab = dir / "l";
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
  expect_bad([&] { load_dataset(o); }, dir / "train-images-idx3-ubyte.gz", "file not found");
  write(dir / "train-images-idx3-ubyte.gz", gzip(idx_images(3, 2, 2)));
  expect_bad([&] { load_dataset(o); }, dir / "train-labels-idx1-ubyte.gz", "file not found");
  write(dir / "train-labels-idx1-ubyte", idx_labels({1, 2}));
  expect_bad([&] { load_dataset(o); }, dir / "train-images-idx3-ubyte.gz",
             "3 images but " + dir / "train-labels-idx1-ubyte" + " has 2 labels");
  o.data_dir = dir / "nope";
  expect_bad([&] { load_dataset(o); }, dir / "nope", "data folder not found");
  o.name = "imagenet";
  expect_bad([&] { load_dataset(o); }, "--dataset", "unknown dataset 'imagenet'");
  o.name = "cifar10";
  o.data_dir = "";
  expect_bad([&] { load_dataset(o); }, "--data-dir", "required");
}

TEST_CASE("CIFAR-10 binary batches, from the folder or its cifar-10-batches-bin subfolder") {
  TempDir dir;
  const std::string sub = dir / "cifar-10-batches-bin";
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
  expect_bad([&] { load_dataset(o); }, dir / "data_batch_1.bin", "also looked in " + sub);
}

TEST_CASE("CIFAR-100 binary: fine labels, 100 classes") {
  TempDir dir;
  write(dir / "train.bin", cifar_record({19, 99}, 5) + cifar_record({0, 42}, 6));
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

  write(dir / "train.bin", cifar_record({1, 100}, 0));
  expect_bad([&] { load_dataset(o); }, dir / "train.bin", "label 100 is out of range [0, 100)");
  write(dir / "train.bin", cifar_record({20, 1}, 0));
  expect_bad([&] { load_dataset(o); }, dir / "train.bin", "coarse label 20");
  write(dir / "train.bin", cifar_record({1, 1}, 0).substr(1));
  expect_bad([&] { load_dataset(o); }, dir / "train.bin", "3074-byte record");
  write(dir / "train.bin", "");
  expect_bad([&] { load_dataset(o); }, dir / "train.bin", "size 0");
  o.train = false;
  expect_bad([&] { load_dataset(o); }, dir / "test.bin", "file not found");
  write(dir / "cifar-100-binary/test.bin", cifar_record({1, 7}, 0));
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
