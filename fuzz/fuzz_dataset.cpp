// Fuzz target: bytes -> the dataset readers of datasets/dataset.h.
//
//   build-fz/fuzz/fuzz_dataset -max_total_time=60 corpus/dataset
//
// The first byte picks the reader, the rest is the file (gzip or raw):
//   0 read_idx_images   1 read_idx_labels (10 classes)
//   2 CIFAR-10 test_batch.bin via load_dataset   3 CIFAR-100 test.bin via load_dataset
//   4 Fashion-MNIST folder via load_dataset: byte 1..4 = big-endian length of the
//     image file, then the image file, then the label file (image/label count check).
//   5 npz file via load_dataset (zip: stored or deflated members; npy headers)
// Readers take paths, so the bytes are written to scratch files first.
#include <filesystem>
#include <string>

#include "datasets/dataset.h"
#include "fuzz/fuzz_util.h"

using namespace trainrt;
namespace fs = std::filesystem;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t mode = data[0] % 6;
  ++data, --size;
  const uint64_t max_bytes = 16u << 20;  // gzip bombs stop here, under -rss_limit_mb
  static const fs::path dir = fuzz::scratch_dir() / "data";
  fs::create_directories(dir);
  return fuzz::expect_clean_error([&] {
    if (mode == 0 || mode == 1) {
      const fs::path p = dir / "file-idx-ubyte";
      fuzz::write_bytes(p, data, size);
      if (mode == 0) (void)read_idx_images(p.string(), max_bytes);
      if (mode == 1) (void)read_idx_labels(p.string(), 10, max_bytes);
      return;
    }
    if (mode == 5) {
      const fs::path p = dir / "arrays.npz";
      fuzz::write_bytes(p, data, size);
      DatasetOptions o;
      o.name = "npz";
      o.data_dir = p.string();
      o.max_file_bytes = max_bytes;
      (void)load_dataset(o);
      return;
    }
    DatasetOptions o;
    o.train = false;
    o.data_dir = dir.string();
    o.max_file_bytes = max_bytes;
    for (const char* f : {"test_batch.bin", "test.bin", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"})
      fs::remove(dir / f);
    if (mode == 2 || mode == 3) {
      o.name = mode == 2 ? "cifar10" : "cifar100";
      fuzz::write_bytes(dir / (mode == 2 ? "test_batch.bin" : "test.bin"), data, size);
      o.limit = size > 0 ? data[0] % 4 : 0;  // 0 = all; else the first 1..3 records
    } else {
      if (size < 4) return;
      size_t n = (size_t{data[0]} << 24) | (size_t{data[1]} << 16) | (size_t{data[2]} << 8) | data[3];
      data += 4, size -= 4;
      n = std::min(n, size);
      o.name = "fashion-mnist";
      fuzz::write_bytes(dir / "t10k-images-idx3-ubyte", data, n);
      fuzz::write_bytes(dir / "t10k-labels-idx1-ubyte", data + n, size - n);
    }
    Dataset d = load_dataset(o);
    (void)d;
  });
}
