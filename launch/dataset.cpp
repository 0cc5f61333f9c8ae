#include "launch/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace trainrt {
namespace fs = std::filesystem;

namespace {

uint32_t be32(const std::string& b, size_t at) {
  auto u = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(b[at + i])); };
  return (u(0) << 24) | (u(1) << 16) | (u(2) << 8) | u(3);
}

std::string hex32(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof s, "0x%08x", v);
  return s;
}

// The first existing path among candidates; BadInput naming them all when none exists.
std::string find_file(const std::vector<std::string>& candidates) {
  std::error_code ec;
  for (const std::string& c : candidates)
    if (fs::is_regular_file(c, ec)) return c;
  std::string also;
  for (size_t i = 1; i < candidates.size(); ++i) also += (i > 1 ? ", " : "") + candidates[i];
  throw_bad_input(candidates[0], also.empty() ? "file not found" : "file not found (also looked for " + also + ")");
}

void check_dir(const std::string& dir, const std::string& dataset) {
  std::error_code ec;
  if (dir.empty()) throw_bad_input("--data-dir", "required for dataset '" + dataset + "'");
  if (!fs::is_directory(dir, ec)) throw_bad_input(dir, "data folder not found");
}

Dataset load_idx(const std::string& name, const std::string& dir, const DatasetOptions& o) {
  check_dir(dir, name);
  const std::string split = o.train ? "train" : "t10k";
  // Debian/Yann LeCun layout, gzipped or not; torchvision keeps the same names under <Name>/raw.
  const std::string tv = name == "mnist" ? "MNIST/raw/" : "FashionMNIST/raw/";
  auto where = [&](const std::string& base) {
    std::string p = (fs::path(dir) / base).string(), q = (fs::path(dir) / tv / base).string();
    return find_file({p + ".gz", p, q + ".gz", q});
  };
  std::string img_path = where(split + "-images-idx3-ubyte");
  std::string lab_path = where(split + "-labels-idx1-ubyte");
  Dataset d;
  d.name = name;
  d.source = img_path;
  d.classes = 10;
  d.images = read_idx_images(img_path, o.max_file_bytes);
  d.labels = read_idx_labels(lab_path, d.classes, o.max_file_bytes);
  if (d.images.dims()[0] != d.labels.dims()[0])
    throw_bad_input(img_path, std::to_string(d.images.dims()[0]) + " images but " + lab_path + " has " +
                                  std::to_string(d.labels.dims()[0]) + " labels");
  if (name == "mnist") {
    d.mean = {0.1307f};
    d.std = {0.3081f};
  } else {
    d.mean = {0.2860f};
    d.std = {0.3530f};
  }
  return d;
}

// CIFAR binary: records of `label_bytes` + 3072 pixels; label byte `label_at` is the class.
Dataset load_cifar(const std::string& name, const std::string& dir, const DatasetOptions& o) {
  check_dir(dir, name);
  const bool c10 = name == "cifar10";
  const std::string sub = c10 ? "cifar-10-batches-bin" : "cifar-100-binary";
  std::vector<std::string> names;
  if (c10 && o.train)
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  else
    names.push_back(c10 ? "test_batch.bin" : (o.train ? "train.bin" : "test.bin"));
  // The folder itself or its standard subfolder: whichever holds the first file.
  std::error_code ec;
  fs::path base = dir;
  if (!fs::is_regular_file(base / names[0], ec) && fs::is_regular_file(base / sub / names[0], ec)) base /= sub;
  std::vector<std::string> paths;
  for (const std::string& n : names) {
    std::string p = (base / n).string();
    if (!fs::is_regular_file(p, ec))
      throw_bad_input(p, base == fs::path(dir) ? "file not found (also looked in " + (base / sub).string() + ")"
                                               : "file not found");
    paths.push_back(p);
  }

  const int64_t label_bytes = c10 ? 1 : 2, pixels = 3 * 32 * 32, record = label_bytes + pixels;
  const int64_t classes = c10 ? 10 : 100;
  std::vector<std::string> files;
  int64_t total = 0;
  for (const std::string& p : paths) {
    if (o.limit > 0 && total >= o.limit) break;  // enough samples: later files are not read
    std::string bytes = read_file_bytes(p, o.max_file_bytes);
    int64_t size = static_cast<int64_t>(bytes.size());
    if (size == 0 || size % record != 0)
      throw_bad_input(p, "size " + std::to_string(size) + " is not a positive multiple of the " +
                             std::to_string(record) + "-byte record of " + name);
    total += size / record;
    files.push_back(std::move(bytes));
  }
  if (o.limit > 0) total = std::min(total, o.limit);

  Dataset d;
  d.name = name;
  d.source = base.string();
  d.classes = classes;
  d.images = Tensor(DataType::UInt8, {total, 3, 32, 32});
  d.labels = Tensor(DataType::Int64, {total});
  uint8_t* img = d.images.data<uint8_t>();
  int64_t* lab = d.labels.data<int64_t>();
  int64_t i = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto* b = reinterpret_cast<const uint8_t*>(files[f].data());
    int64_t records = static_cast<int64_t>(files[f].size()) / record;
    for (int64_t r = 0; r < records && i < total; ++r, ++i) {
      const uint8_t* rec = b + r * record;
      if (!c10 && rec[0] >= 20)
        throw_bad_input(paths[f], "record " + std::to_string(r) + ": coarse label " + std::to_string(rec[0]) +
                                      " is out of range [0, 20)");
      int64_t label = rec[label_bytes - 1];
      if (label >= classes)
        throw_bad_input(paths[f], "record " + std::to_string(r) + ": label " + std::to_string(label) +
                                      " is out of range [0, " + std::to_string(classes) + ")");
      lab[i] = label;
      std::memcpy(img + i * pixels, rec + label_bytes, static_cast<size_t>(pixels));
    }
  }
  if (c10) {
    d.mean = {0.4914f, 0.4822f, 0.4465f};
    d.std = {0.2470f, 0.2435f, 0.2616f};
  } else {
    d.mean = {0.5071f, 0.4867f, 0.4408f};
    d.std = {0.2675f, 0.2565f, 0.2761f};
  }
  return d;
}

}  // namespace

std::string read_maybe_gzip(const std::string& path, uint64_t max_bytes) {
  std::string in = read_file_bytes(path, max_bytes);
  if (in.size() < 2 || static_cast<unsigned char>(in[0]) != 0x1f || static_cast<unsigned char>(in[1]) != 0x8b)
    return in;
  z_stream z{};
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) throw_internal(path, "zlib inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(in.data());
  z.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), UINT32_MAX));
  size_t in_left = in.size() - z.avail_in;  // inputs over 4 GiB are fed in slices
  std::string out;
  size_t used = 0;
  for (;;) {
    if (used == out.size()) {
      // One byte past the limit tells "exactly at the limit" from "over it".
      if (out.size() > max_bytes) {
        inflateEnd(&z);
        throw_bad_input(path, "decompresses to more than the limit of " + std::to_string(max_bytes) + " bytes");
      }
      // Grow with the data actually produced (never with a size claimed by a header).
      out.resize(std::min<uint64_t>(max_bytes + 1, std::max<size_t>(size_t{1} << 20, out.size() * 2)));
    }
    z.next_out = reinterpret_cast<Bytef*>(out.data() + used);
    z.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - used, UINT32_MAX));
    uInt before = z.avail_out;
    int rc = inflate(&z, Z_NO_FLUSH);
    used += before - z.avail_out;
    if (z.avail_in == 0 && in_left > 0) {
      z.avail_in = static_cast<uInt>(std::min<size_t>(in_left, UINT32_MAX));
      in_left -= z.avail_in;
    }
    if (rc == Z_STREAM_END) {
      if (z.avail_in == 0) break;
      // Concatenated gzip members (as `cat a.gz b.gz` makes) are one stream.
      if (z.avail_in >= 2 && z.next_in[0] == 0x1f && z.next_in[1] == 0x8b) {
        inflateReset(&z);
        continue;
      }
      inflateEnd(&z);
      throw_bad_input(path, "unexpected bytes after the end of the gzip data");
    }
    if (rc == Z_BUF_ERROR && z.avail_in == 0) {
      inflateEnd(&z);
      throw_bad_input(path, "truncated gzip data (ends after " + std::to_string(used) + " decompressed bytes)");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      std::string msg = z.msg ? z.msg : "error " + std::to_string(rc);
      inflateEnd(&z);
      throw_bad_input(path, "corrupt gzip data: " + msg);
    }
  }
  inflateEnd(&z);
  if (used > max_bytes)
    throw_bad_input(path, "decompresses to more than the limit of " + std::to_string(max_bytes) + " bytes");
  out.resize(used);
  return out;
}

Tensor read_idx_images(const std::string& path, uint64_t max_bytes) {
  std::string b = read_maybe_gzip(path, max_bytes);
  if (b.size() < 16)
    throw_bad_input(path, "file of " + std::to_string(b.size()) + " bytes is too short for an IDX image header");
  uint32_t magic = be32(b, 0);
  if (magic != 0x803)
    throw_bad_input(path, "bad magic " + hex32(magic) + ", expected 0x00000803 (IDX uint8 images, 3 dims)" +
                              (magic == 0x801 ? "; this is a label file" : ""));
  uint64_t n = be32(b, 4), rows = be32(b, 8), cols = be32(b, 12);
  if (n == 0 || rows == 0 || cols == 0)
    throw_bad_input(path, "header has a zero dimension: " + std::to_string(n) + " images of " + std::to_string(rows) +
                              "x" + std::to_string(cols));
  // Each factor is < 2^32, so rows*cols fits; n*rows*cols is compared by division.
  uint64_t have = b.size() - 16, image = rows * cols;
  if (n > have / image || n * image != have)
    throw_bad_input(path, "header says " + std::to_string(n) + " images of " + std::to_string(rows) + "x" +
                              std::to_string(cols) + " but the file holds " + std::to_string(have) + " pixel bytes" +
                              (n > have / image ? " (truncated or bad header)" : " (extra bytes)"));
  Tensor t(DataType::UInt8, {static_cast<int64_t>(n), 1, static_cast<int64_t>(rows), static_cast<int64_t>(cols)});
  std::memcpy(t.raw(), b.data() + 16, have);
  return t;
}

Tensor read_idx_labels(const std::string& path, int64_t classes, uint64_t max_bytes) {
  std::string b = read_maybe_gzip(path, max_bytes);
  if (b.size() < 8)
    throw_bad_input(path, "file of " + std::to_string(b.size()) + " bytes is too short for an IDX label header");
  uint32_t magic = be32(b, 0);
  if (magic != 0x801)
    throw_bad_input(path, "bad magic " + hex32(magic) + ", expected 0x00000801 (IDX uint8 labels, 1 dim)" +
                              (magic == 0x803 ? "; this is an image file" : ""));
  uint64_t n = be32(b, 4), have = b.size() - 8;
  if (n == 0) throw_bad_input(path, "header says 0 labels");
  if (n != have)
    throw_bad_input(path, "header says " + std::to_string(n) + " labels but the file holds " + std::to_string(have) +
                              (n > have ? " (truncated or bad header)" : " (extra bytes)"));
  Tensor t(DataType::Int64, {static_cast<int64_t>(n)});
  int64_t* out = t.data<int64_t>();
  for (uint64_t i = 0; i < n; ++i) {
    int64_t v = static_cast<unsigned char>(b[8 + i]);
    if (v >= classes)
      throw_bad_input(path, "label " + std::to_string(v) + " at index " + std::to_string(i) + " is out of range [0, " +
                                std::to_string(classes) + ")");
    out[i] = v;
  }
  return t;
}

Dataset take_first(const Dataset& d, int64_t n) {
  if (n <= 0 || n >= d.size()) return d;
  return take_range(d, 0, n);
}

Dataset take_range(const Dataset& d, int64_t begin, int64_t n) {
  if (begin < 0 || n < 0 || begin + n > d.size()) throw_internal("take_range", "range outside the dataset");
  Dataset s = d;
  std::vector<int64_t> dims = d.images.dims();
  dims[0] = n;
  s.images = Tensor(DataType::UInt8, dims);
  const size_t row = static_cast<size_t>(d.sample_bytes());
  if (n) std::memcpy(s.images.raw(), d.images.raw() + static_cast<size_t>(begin) * row, s.images.nbytes());
  s.labels = Tensor(DataType::Int64, {n});
  if (n) std::memcpy(s.labels.raw(), d.labels.raw() + static_cast<size_t>(begin) * sizeof(int64_t), s.labels.nbytes());
  return s;
}

std::string default_data_dir(const std::string& name) {
  if (name == "fashion-mnist") return "/usr/share/datasets/fashion-mnist";  // Debian dataset-fashion-mnist
  return "";
}

Dataset load_dataset(const DatasetOptions& o) {
  std::string dir = o.data_dir.empty() ? default_data_dir(o.name) : o.data_dir;
  if (o.limit < 0) throw_bad_input("--limit", "must be >= 0, got " + std::to_string(o.limit));
  if (o.name == "fashion-mnist" || o.name == "mnist") return take_first(load_idx(o.name, dir, o), o.limit);
  if (o.name == "cifar10" || o.name == "cifar100") return load_cifar(o.name, dir, o);
  throw_bad_input("--dataset", "unknown dataset '" + o.name + "' (expected fashion-mnist, mnist, cifar10, cifar100)");
}

}  // namespace trainrt
