#include "training/checkpoint.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace trainrt {

namespace fs = std::filesystem;

namespace {

constexpr char kMagic[] = "trainrt-checkpoint\n";
constexpr size_t kMagicSize = sizeof(kMagic) - 1;       // 19
constexpr size_t kHeaderSize = kMagicSize + 4 + 8 + 4;  // magic, version, size, crc
constexpr uint32_t kVersion = 1;
constexpr uint64_t kMaxPayload = uint64_t{INT32_MAX};  // protobuf's limit

void put_le(std::string& s, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const std::string& s, size_t at, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s[at + i])) << (8 * i);
  return v;
}

uint32_t crc32_of(const char* p, uint64_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  while (n > 0) {
    const uInt chunk = static_cast<uInt>(std::min<uint64_t>(n, 1u << 30));
    crc = ::crc32(crc, reinterpret_cast<const Bytef*>(p), chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string hex_double(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a", v);
  return buf;
}

// Trainer fields as (key, value) strings, and back.
std::map<std::string, std::string> trainer_fields(const TrainerState& t) {
  std::map<std::string, std::string> m;
  m["epoch"] = std::to_string(t.epoch);
  m["step_in_epoch"] = std::to_string(t.step_in_epoch);
  m["global_step"] = std::to_string(t.global_step);
  m["seed"] = std::to_string(t.seed);
  m["lr"] = hex_double(t.lr);
  m["epoch_loss_sum"] = hex_double(t.epoch_loss_sum);
  m["epoch_seconds"] = hex_double(t.epoch_seconds);
  m["total_seconds"] = hex_double(t.total_seconds);
  m["total_images"] = std::to_string(t.total_images);
  std::string acc;
  for (double a : t.val_accuracy) acc += (acc.empty() ? "" : ",") + hex_double(a);
  m["val_accuracy"] = acc;
  for (const auto& [k, v] : t.config) m["config." + k] = v;
  return m;
}

struct FieldReader {
  const std::map<std::string, std::string>& m;
  const std::string& where;
  const std::string& get(const std::string& k) const {
    auto it = m.find(k);
    if (it == m.end()) throw_bad_input(where, "checkpoint has no trainer field '" + k + "'");
    return it->second;
  }
  int64_t integer(const std::string& k, bool non_negative = true) const {
    const std::string& s = get(k);
    errno = 0;
    char* end = nullptr;
    long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0' || errno == ERANGE || (non_negative && v < 0))
      throw_bad_input(where, "checkpoint field '" + k + "' is not a valid count: '" + s + "'");
    return v;
  }
  double number(const std::string& s, const std::string& k) const {
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0') throw_bad_input(where, "checkpoint field '" + k + "' is not a number: '" + s + "'");
    return v;
  }
  double number(const std::string& k) const { return number(get(k), k); }
};

TrainerState trainer_from_fields(const std::map<std::string, std::string>& m, const std::string& where) {
  FieldReader r{m, where};
  TrainerState t;
  t.epoch = r.integer("epoch");
  t.step_in_epoch = r.integer("step_in_epoch");
  t.global_step = r.integer("global_step");
  const std::string& seed = r.get("seed");
  char* end = nullptr;
  errno = 0;
  t.seed = std::strtoull(seed.c_str(), &end, 10);
  if (seed.empty() || *end != '\0' || errno == ERANGE || seed[0] == '-')
    throw_bad_input(where, "checkpoint field 'seed' is not valid: '" + seed + "'");
  t.lr = r.number("lr");
  t.epoch_loss_sum = r.number("epoch_loss_sum");
  t.epoch_seconds = r.number("epoch_seconds");
  t.total_seconds = r.number("total_seconds");
  t.total_images = r.integer("total_images");
  const std::string& acc = r.get("val_accuracy");
  for (size_t at = 0; at < acc.size();) {
    size_t comma = acc.find(',', at);
    if (comma == std::string::npos) comma = acc.size();
    t.val_accuracy.push_back(r.number(acc.substr(at, comma - at), "val_accuracy"));
    at = comma + 1;
  }
  if (static_cast<int64_t>(t.val_accuracy.size()) > t.epoch)
    throw_bad_input(where, "checkpoint has more validation accuracies than completed epochs");
  for (const auto& [k, v] : m)
    if (k.rfind("config.", 0) == 0) t.config[k.substr(7)] = v;
  return t;
}

Tensor tensor_from(const onnx::TensorProto& p, const std::string& where) {
  const std::string at = where + ": tensor '" + p.name() + "'";
  const auto dtype = static_cast<DataType>(p.data_type());
  if (!dtype_is_supported(dtype) || dtype_size(dtype) == 0)
    throw_bad_input(at, "unsupported data_type " + std::to_string(p.data_type()));
  if (p.dims_size() > 8) throw_bad_input(at, "rank " + std::to_string(p.dims_size()) + " is over 8");
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  uint64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > (int64_t{1} << 40)) throw_bad_input(at, "bad dimension " + std::to_string(d));
    numel *= static_cast<uint64_t>(d);
    if (numel > (uint64_t{1} << 40)) throw_bad_input(at, "too many elements");
  }
  if (!p.has_raw_data() || p.raw_data().size() != numel * dtype_size(dtype))
    throw_bad_input(at, "raw_data has " + std::to_string(p.raw_data().size()) + " bytes, expected " +
                            std::to_string(numel * dtype_size(dtype)) + " for " + dims_to_string(dims));
  Tensor t(dtype, dims);
  if (t.nbytes() > 0) std::memcpy(t.raw(), p.raw_data().data(), t.nbytes());
  return t;
}

}  // namespace

std::string checkpoint_bytes(const Checkpoint& c) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("trainrt-checkpoint");
  m.add_opset_import()->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("checkpoint");
  for (const auto& [name, t] : c.state) {
    onnx::TensorProto* p = g->add_initializer();
    p->set_name(name);
    p->set_data_type(static_cast<int32_t>(t.dtype()));
    for (int64_t d : t.dims()) p->add_dims(d);
    p->set_raw_data(reinterpret_cast<const char*>(t.raw()), t.nbytes());
  }
  for (const auto& [k, v] : trainer_fields(c.trainer)) {
    onnx::StringStringEntryProto* e = m.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  }
  std::string payload;
  if (!m.SerializeToString(&payload)) throw_internal("checkpoint", "protobuf serialisation failed");
  if (payload.size() > kMaxPayload)
    throw_unsupported("checkpoint", "state of " + std::to_string(payload.size()) + " bytes is over the 2 GiB limit");
  std::string out(kMagic, kMagicSize);
  put_le(out, kVersion, 4);
  put_le(out, payload.size(), 8);
  put_le(out, crc32_of(payload.data(), payload.size()), 4);
  out += payload;
  return out;
}

Checkpoint parse_checkpoint(const std::string& bytes, const std::string& where) {
  if (bytes.size() < kHeaderSize || bytes.compare(0, kMagicSize, kMagic, kMagicSize) != 0)
    throw_bad_input(where, bytes.size() < kHeaderSize && bytes.compare(0, std::min(bytes.size(), kMagicSize), kMagic,
                                                                       std::min(bytes.size(), kMagicSize)) == 0
                               ? "checkpoint is truncated (" + std::to_string(bytes.size()) + " bytes, no full header)"
                               : "is not a trainrt checkpoint (bad magic)");
  const uint64_t version = get_le(bytes, kMagicSize, 4);
  if (version != kVersion)
    throw_unsupported(where, "checkpoint version " + std::to_string(version) + " (this build reads version 1)");
  const uint64_t size = get_le(bytes, kMagicSize + 4, 8);
  const uint32_t crc = static_cast<uint32_t>(get_le(bytes, kMagicSize + 12, 4));
  if (size > kMaxPayload || bytes.size() - kHeaderSize != size)
    throw_bad_input(where, std::string("checkpoint is ") +
                               (bytes.size() - kHeaderSize < size ? "truncated" : "corrupted") + ": header says " +
                               std::to_string(size) + " payload bytes, file has " +
                               std::to_string(bytes.size() - kHeaderSize));
  const char* payload = bytes.data() + kHeaderSize;
  if (crc32_of(payload, size) != crc) throw_bad_input(where, "checkpoint is corrupted (CRC-32 mismatch)");

  onnx::ModelProto m;
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(payload), static_cast<int>(size));
  in.SetTotalBytesLimit(INT32_MAX);
  in.SetRecursionLimit(16);
  if (!m.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage() || m.producer_name() != "trainrt-checkpoint")
    throw_bad_input(where, "checkpoint payload is not a trainrt checkpoint (protobuf parse failed)");
  Checkpoint c;
  for (const onnx::TensorProto& p : m.graph().initializer()) {
    if (p.name().empty() || c.state.count(p.name()))
      throw_bad_input(where, "checkpoint tensor name '" + p.name() + "' is empty or repeated");
    c.state.emplace(p.name(), tensor_from(p, where));
  }
  std::map<std::string, std::string> fields;
  for (const auto& e : m.metadata_props()) fields[e.key()] = e.value();
  c.trainer = trainer_from_fields(fields, where);
  return c;
}

void write_checkpoint(const Checkpoint& c, const std::string& path) { write_file_atomic(path, checkpoint_bytes(c)); }

Checkpoint read_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw_bad_input(path, "checkpoint does not exist");
  return parse_checkpoint(read_file_bytes(path, kMaxPayload + kHeaderSize), path);
}

std::string checkpoint_path(const std::string& dir, int64_t global_step) {
  char name[64];
  std::snprintf(name, sizeof name, "checkpoint-%010lld.ckpt", static_cast<long long>(global_step));
  return (fs::path(dir) / name).string();
}

std::vector<std::string> list_checkpoints(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return {};
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string n = e.path().filename().string();
    // Exactly "checkpoint-" + 10 digits + ".ckpt"; temporaries start with '.'.
    if (n.size() != 26 || n.rfind("checkpoint-", 0) != 0 || n.substr(21) != ".ckpt") continue;
    if (!std::all_of(n.begin() + 11, n.begin() + 21, [](char ch) { return ch >= '0' && ch <= '9'; })) continue;
    names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  std::vector<std::string> paths;
  for (const auto& n : names) paths.push_back((fs::path(dir) / n).string());
  return paths;
}

std::string latest_checkpoint(const std::string& dir) {
  auto all = list_checkpoints(dir);
  return all.empty() ? "" : all.back();
}

void prune_checkpoints(const std::string& dir, int64_t keep) {
  auto all = list_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(std::max<int64_t>(keep, 1)) < all.size(); ++i) {
    std::error_code ec;
    fs::remove(all[i], ec);
  }
}

std::string config_mismatch(const std::map<std::string, std::string>& saved,
                            const std::map<std::string, std::string>& now) {
  for (const auto& [k, v] : now) {
    auto it = saved.find(k);
    const std::string old = it == saved.end() ? "(nothing)" : it->second;
    if (old != v) return "--" + k + ": the checkpoint was written with '" + old + "', this run has '" + v + "'";
  }
  return "";
}

}  // namespace trainrt
