#include "datasets/dataset.h"

#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

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

// ---------------------------------------------------------------- image folders
// The image files under class folder `dir` in torchvision's order (os.walk sorted:
// by folder, then by name within a folder), symlinks followed.
std::vector<std::string> class_images(const fs::path& dir) {
  std::vector<std::pair<std::string, std::string>> found;  // (folder, name)
  std::error_code ec;
  auto it = fs::recursive_directory_iterator(dir, fs::directory_options::follow_directory_symlink, ec);
  if (ec) throw_bad_input(dir.string(), "cannot list folder: " + ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    if (ec) throw_bad_input(dir.string(), "cannot list folder: " + ec.message());
    const fs::path& p = it->path();
    if (it->is_regular_file(ec) && has_image_extension(p.filename().string()))
      found.emplace_back(p.parent_path().string(), p.filename().string());
  }
  std::sort(found.begin(), found.end());
  std::vector<std::string> files;
  files.reserve(found.size());
  for (const auto& [folder, name] : found) files.push_back((fs::path(folder) / name).string());
  return files;
}

std::vector<std::string> subfolders(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.is_directory(ec)) names.push_back(e.path().filename().string());
  if (ec) throw_bad_input(dir.string(), "cannot list folder: " + ec.message());
  std::sort(names.begin(), names.end());
  return names;
}

Dataset load_image_folder(const std::string& dir, const DatasetOptions& o) {
  check_dir(dir, "imagefolder");
  if (o.image_size < 1) throw_bad_input("--image-size", "must be >= 1, got " + std::to_string(o.image_size));
  std::error_code ec;
  const fs::path train = fs::path(dir) / "train", val = fs::path(dir) / "val";
  if (!fs::is_directory(train, ec))
    throw_bad_input(train.string(), "folder not found (an image folder dataset is D/train/<class>/<image>)");
  const std::vector<std::string> classes = subfolders(train);
  if (classes.empty()) throw_bad_input(train.string(), "has no class folders (expected train/<class>/<image>)");
  const fs::path split = o.train || !fs::is_directory(val, ec) ? train : val;
  Dataset d;
  d.name = "imagefolder";
  d.source = split.string();
  d.classes = static_cast<int64_t>(classes.size());
  d.class_names = classes;
  d.image_size = o.image_size;
  d.mean = {0.485f, 0.456f, 0.406f};  // ImageNet's, as torchvision's reference scripts
  d.std = {0.229f, 0.224f, 0.225f};
  std::vector<int64_t> labels;
  for (const std::string& c : subfolders(split)) {
    const auto at = std::lower_bound(classes.begin(), classes.end(), c);
    if (at == classes.end() || *at != c)
      throw_bad_input((split / c).string(), "class '" + c + "' is not a class of " + train.string() +
                                                " (a validation class must also be a training class)");
    std::vector<std::string> files = class_images(split / c);
    if (files.empty()) throw_bad_input((split / c).string(), "class folder has no images (.jpg, .jpeg, .png, ...)");
    for (std::string& f : files) {
      if (o.limit > 0 && static_cast<int64_t>(d.files.size()) >= o.limit) break;
      d.files.push_back(std::move(f));
      labels.push_back(at - classes.begin());
    }
  }
  if (d.files.empty()) throw_bad_input(split.string(), "has no images");
  d.labels = Tensor(DataType::Int64, {static_cast<int64_t>(labels.size())});
  std::copy(labels.begin(), labels.end(), d.labels.data<int64_t>());
  return d;
}

// ---------------------------------------------------------------- npz
uint16_t le16(const std::string& b, size_t at) {
  return static_cast<uint16_t>(static_cast<unsigned char>(b[at]) | (static_cast<unsigned char>(b[at + 1]) << 8));
}
uint32_t le32(const std::string& b, size_t at) { return le16(b, at) | (static_cast<uint32_t>(le16(b, at + 2)) << 16); }
uint64_t le64(const std::string& b, size_t at) { return le32(b, at) | (static_cast<uint64_t>(le32(b, at + 4)) << 32); }

std::string inflate_raw(const std::string& in, uint64_t size, const std::string& where) {
  std::string out(size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw_internal(where, "zlib inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(size);
  int rc = inflate(&z, Z_FINISH);
  const uint64_t got = size - z.avail_out;
  inflateEnd(&z);
  if (rc != Z_STREAM_END || got != size)
    throw_bad_input(where, "corrupt deflate data (" + std::to_string(got) + " of " + std::to_string(size) +
                               " bytes inflated" + (z.msg ? std::string(", ") + z.msg : "") + ")");
  return out;
}

// numpy's header dict: {'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }
std::string npy_field(const std::string& header, const std::string& key, const std::string& where) {
  const size_t k = header.find("'" + key + "'");
  if (k == std::string::npos) throw_bad_input(where, "npy header lacks '" + key + "': " + header);
  size_t v = header.find(':', k);
  if (v == std::string::npos) throw_bad_input(where, "bad npy header: " + header);
  ++v;
  while (v < header.size() && header[v] == ' ') ++v;
  const char open = v < header.size() ? header[v] : 0;
  const size_t end = open == '(' ? header.find(')', v) : open == '\'' ? header.find('\'', v + 1) : header.find(',', v);
  if (end == std::string::npos) throw_bad_input(where, "bad npy header: " + header);
  return open == '(' || open == '\'' ? header.substr(v + 1, end - v - 1) : header.substr(v, end - v);
}

}  // namespace

bool has_image_extension(const std::string& filename) {
  std::string lower = filename;
  for (char& ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  for (const char* e : {".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp"}) {
    const size_t n = std::strlen(e);
    if (lower.size() > n && lower.compare(lower.size() - n, n, e) == 0) return true;
  }
  return false;
}

Tensor parse_npy(const std::string& b, const std::string& where) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0) throw_bad_input(where, "not a .npy array (bad magic)");
  const int major = static_cast<unsigned char>(b[6]);
  if (major < 1 || major > 3) throw_bad_input(where, "unsupported .npy version " + std::to_string(major));
  const size_t hlen = major == 1 ? le16(b, 8) : (b.size() >= 12 ? le32(b, 8) : SIZE_MAX);
  const size_t start = major == 1 ? 10 : 12;
  if (hlen > b.size() - start) throw_bad_input(where, ".npy header is truncated");
  const std::string header = b.substr(start, hlen);
  const std::string descr = npy_field(header, "descr", where);
  if (npy_field(header, "fortran_order", where) != "False")
    throw_bad_input(where, "Fortran-ordered arrays are not supported (save np.ascontiguousarray(a))");
  std::vector<int64_t> dims;
  std::stringstream shape(npy_field(header, "shape", where));
  for (std::string item; std::getline(shape, item, ',');) {
    if (item.find_first_not_of(' ') == std::string::npos) continue;
    size_t used = 0;
    long long v = -1;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
    }
    if (v < 0 || v > (int64_t{1} << 40)) throw_bad_input(where, "bad dimension '" + item + "' in shape");
    dims.push_back(v);
  }
  struct Kind {
    const char* code;
    DataType type;
  };
  static const Kind kinds[] = {{"f4", DataType::Float32}, {"f8", DataType::Float64}, {"u1", DataType::UInt8},
                               {"i1", DataType::Int8},    {"i2", DataType::Int16},   {"i4", DataType::Int32},
                               {"i8", DataType::Int64},   {"u2", DataType::UInt16},  {"u4", DataType::UInt32},
                               {"u8", DataType::UInt64},  {"b1", DataType::Bool}};
  if (descr.size() != 3 || (descr[0] != '<' && descr[0] != '|' && descr[0] != '>'))
    throw_bad_input(where, "unsupported dtype '" + descr + "'");
  const Kind* kind = nullptr;
  for (const Kind& k : kinds)
    if (descr.compare(1, 2, k.code) == 0) kind = &k;
  if (!kind) throw_bad_input(where, "unsupported dtype '" + descr + "'");
  const size_t item = dtype_size(kind->type);
  uint64_t count = 1;
  for (int64_t d : dims) {
    if (d != 0 && count > (uint64_t{1} << 40) / static_cast<uint64_t>(d))
      throw_bad_input(where, "shape " + dims_to_string(dims) + " is too large");
    count *= static_cast<uint64_t>(d);
  }
  const size_t data = start + hlen;
  if (count * item != b.size() - data)
    throw_bad_input(where, "shape " + dims_to_string(dims) + " of " + descr + " needs " + std::to_string(count * item) +
                               " bytes, the array holds " + std::to_string(b.size() - data));
  Tensor t(kind->type, dims);
  if (count) std::memcpy(t.raw(), b.data() + data, count * item);
  if (descr[0] == '>' && item > 1) {
    auto* p = reinterpret_cast<unsigned char*>(t.raw());
    for (uint64_t i = 0; i < count; ++i) std::reverse(p + i * item, p + (i + 1) * item);
  }
  return t;
}

std::map<std::string, Tensor> read_npz(const std::string& path, uint64_t max_bytes) {
  const std::string b = read_file_bytes(path, max_bytes);
  // End of central directory: 22 bytes + a comment of up to 64 KiB, at the end.
  size_t eocd = std::string::npos;
  for (size_t i = b.size() >= 22 ? b.size() - 22 : std::string::npos;
       i != std::string::npos && b.size() - i <= 22 + 65535; --i) {
    if (le32(b, i) == 0x06054b50) {
      eocd = i;
      break;
    }
    if (i == 0) break;
  }
  if (eocd == std::string::npos) throw_bad_input(path, "not a .npz (zip) file: no end of central directory");
  uint64_t entries = le16(b, eocd + 10), cd = le32(b, eocd + 16);
  if (eocd >= 20 && le32(b, eocd - 20) == 0x07064b50) {  // zip64 locator
    const uint64_t at = le64(b, eocd - 12);
    if (b.size() < 56 || at > b.size() - 56 || le32(b, at) != 0x06064b50)
      throw_bad_input(path, "corrupt zip64 end record");
    entries = le64(b, at + 32);
    cd = le64(b, at + 48);
  }
  std::map<std::string, Tensor> arrays;
  size_t at = cd;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at > b.size() || b.size() - at < 46 || le32(b, at) != 0x02014b50)
      throw_bad_input(path, "corrupt zip central directory (entry " + std::to_string(e) + ")");
    const uint16_t method = le16(b, at + 10), name_len = le16(b, at + 28), extra_len = le16(b, at + 30),
                   comment_len = le16(b, at + 32);
    uint64_t packed = le32(b, at + 20), size = le32(b, at + 24), local = le32(b, at + 42);
    if (b.size() - at - 46 < static_cast<size_t>(name_len) + extra_len + comment_len)
      throw_bad_input(path, "corrupt zip central directory (entry " + std::to_string(e) + ")");
    const std::string name = b.substr(at + 46, name_len);
    // zip64 extra field: the 0xffffffff fields, in order size, packed size, offset.
    for (size_t x = at + 46 + name_len; x + 4 <= at + 46 + name_len + extra_len;) {
      const uint16_t id = le16(b, x), len = le16(b, x + 2);
      size_t f = x + 4;
      const size_t fend = std::min<size_t>(f + len, at + 46 + name_len + extra_len);
      if (id == 1) {
        for (uint64_t* v : {&size, &packed, &local})
          if (*v == 0xffffffffu && f + 8 <= fend) *v = le64(b, f), f += 8;
      }
      x += 4 + static_cast<size_t>(len);
    }
    at += 46 + static_cast<size_t>(name_len) + extra_len + comment_len;
    const std::string where = path + ":" + name;
    if (local > b.size() || b.size() - local < 30 || le32(b, local) != 0x04034b50)
      throw_bad_input(where, "corrupt zip local header");
    const uint64_t data = local + 30 + le16(b, local + 26) + le16(b, local + 28);
    if (data > b.size() || packed > b.size() - data) throw_bad_input(where, "zip member is truncated");
    if (size > max_bytes) throw_bad_input(where, "member is larger than the limit of " + std::to_string(max_bytes));
    if (method == 8 && size / 1032 > packed)  // deflate expands at most 1032:1
      throw_bad_input(where, "corrupt zip member: " + std::to_string(packed) + " deflated bytes cannot hold " +
                                 std::to_string(size));
    std::string member = b.substr(data, packed);
    if (method == 8)
      member = inflate_raw(member, size, where);
    else if (method != 0)
      throw_bad_input(where, "unsupported zip compression method " + std::to_string(method) + " (stored or deflate)");
    else if (packed != size)
      throw_bad_input(where, "stored member's sizes differ");
    std::string key =
        name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0 ? name.substr(0, name.size() - 4) : name;
    arrays[key] = parse_npy(member, where);
  }
  return arrays;
}

namespace {

// Labels as int64 [N]: any integer array of rank 1 (or N x 1).
Tensor npz_labels(const Tensor& y, int64_t n, const std::string& where) {
  const bool rank_ok = y.rank() == 1 || (y.rank() == 2 && y.dims()[1] == 1);
  if (!rank_ok || y.dims()[0] != n)
    throw_bad_input(
        where, "labels must have shape [" + std::to_string(n) + "] (one per sample), got " + dims_to_string(y.dims()));
  if (dtype_is_float(y.dtype()) || y.dtype() == DataType::Bool)
    throw_bad_input(where, std::string("labels must be integers, got ") + dtype_name(y.dtype()));
  Tensor out(DataType::Int64, {n});
  int64_t* v = out.data<int64_t>();
  auto copy = [&](auto* in) {
    for (int64_t i = 0; i < n; ++i) v[i] = static_cast<int64_t>(in[i]);
  };
  switch (y.dtype()) {
    case DataType::UInt8:
      copy(y.data<uint8_t>());
      break;
    case DataType::Int8:
      copy(y.data<int8_t>());
      break;
    case DataType::Int16:
      copy(y.data<int16_t>());
      break;
    case DataType::UInt16:
      copy(y.data<uint16_t>());
      break;
    case DataType::Int32:
      copy(y.data<int32_t>());
      break;
    case DataType::UInt32:
      copy(y.data<uint32_t>());
      break;
    case DataType::Int64:
      copy(y.data<int64_t>());
      break;
    case DataType::UInt64:
      for (int64_t i = 0; i < n; ++i)
        if (y.data<uint64_t>()[i] > uint64_t{1} << 62)
          throw_bad_input(where, "label at index " + std::to_string(i) + " is too large");
      copy(y.data<uint64_t>());
      break;
    default:
      throw_bad_input(where, std::string("labels must be integers, got ") + dtype_name(y.dtype()));
  }
  for (int64_t i = 0; i < n; ++i)
    if (v[i] < 0)
      throw_bad_input(where, "label " + std::to_string(v[i]) + " at index " + std::to_string(i) + " is < 0");
  return out;
}

Dataset load_npz(const std::string& path, const DatasetOptions& o) {
  if (path.empty()) throw_bad_input("--data-dir", "required for dataset 'npz' (the .npz file)");
  std::map<std::string, Tensor> a = read_npz(path, o.max_file_bytes);
  for (const char* k : {"x", "y"})
    if (!a.count(k)) throw_bad_input(path, std::string("has no array '") + k + "' (expected x: N x ..., y: N labels)");
  const bool has_val = a.count("x_val") || a.count("y_val");
  if (has_val && !(a.count("x_val") && a.count("y_val"))) throw_bad_input(path, "has only one of x_val and y_val");
  const std::string xs = o.train || !has_val ? "x" : "x_val", ys = o.train || !has_val ? "y" : "y_val";
  const Tensor& x = a.at(xs);
  if (x.rank() < 2 || x.dims()[0] < 1)
    throw_bad_input(path + ":" + xs, "must be N x ... with N >= 1 and a sample shape, got " + dims_to_string(x.dims()));
  // Token ids: any signed integer array ([N, T] for a text model), widened to int64.
  const bool tokens = x.dtype() == DataType::Int64 || x.dtype() == DataType::Int32 || x.dtype() == DataType::Int16 ||
                      x.dtype() == DataType::Int8;
  if (x.dtype() != DataType::Float32 && x.dtype() != DataType::Float64 && x.dtype() != DataType::UInt8 && !tokens)
    throw_bad_input(path + ":" + xs, std::string("must be float32, float64, uint8 (images) or int8..int64 (token ids), "
                                                 "got ") +
                                         dtype_name(x.dtype()));
  Dataset d;
  d.name = "npz";
  d.source = path;
  d.images = x.dtype() == DataType::Float64           ? x.cast(DataType::Float32)
             : tokens && x.dtype() != DataType::Int64 ? x.cast(DataType::Int64)
                                                      : x;
  d.labels = npz_labels(a.at(ys), x.dims()[0], path + ":" + ys);
  // Classes over both splits, so that both loads agree.
  int64_t top = -1;
  for (const char* k : {"y", "y_val"})
    if (a.count(k)) {
      const Tensor l = npz_labels(a.at(k), a.at(k).dims().empty() ? 0 : a.at(k).dims()[0], path + ":" + k);
      for (int64_t i = 0; i < l.numel(); ++i) top = std::max(top, l.data<int64_t>()[i]);
    }
  d.classes = top + 1;
  d.mean = {0.f};  // uint8: x/255 as ToTensor gives; float: as stored
  d.std = {1.f};
  return take_first(d, o.limit);
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

std::vector<int64_t> Dataset::sample_dims() const {
  if (from_files()) return {3, image_size, image_size};
  if (images.rank() < 2) return {0, 0, 0};
  return std::vector<int64_t>(images.dims().begin() + 1, images.dims().end());
}

int64_t Dataset::sample_numel() const {
  int64_t n = 1;
  for (int64_t v : sample_dims()) n *= v;
  return n;
}

Dataset take_range(const Dataset& d, int64_t begin, int64_t n) {
  if (begin < 0 || n < 0 || begin + n > d.size()) throw_internal("take_range", "range outside the dataset");
  Dataset s = d;
  s.labels = Tensor(DataType::Int64, {n});
  if (n) std::memcpy(s.labels.raw(), d.labels.raw() + static_cast<size_t>(begin) * sizeof(int64_t), s.labels.nbytes());
  if (d.from_files()) {
    s.files.assign(d.files.begin() + begin, d.files.begin() + begin + n);
    return s;
  }
  std::vector<int64_t> dims = d.images.dims();
  dims[0] = n;
  s.images = Tensor(d.images.dtype(), dims);
  const size_t row = static_cast<size_t>(d.sample_bytes());
  if (n) std::memcpy(s.images.raw(), d.images.raw() + static_cast<size_t>(begin) * row, s.images.nbytes());
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
  if (o.name == "imagefolder") return load_image_folder(dir, o);
  if (o.name == "npz") return load_npz(dir, o);
  throw_bad_input("--dataset", "unknown dataset '" + o.name +
                                   "' (expected fashion-mnist, mnist, cifar10, cifar100, imagefolder, npz)");
}

}  // namespace trainrt
