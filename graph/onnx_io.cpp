#include "graph/onnx_io.h"

#include <fcntl.h>
#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "graph/error.h"
#include "graph/expand_recurrent.h"
#include "graph/infer.h"

namespace trainrt {

namespace fs = std::filesystem;

// ---------------------------------------------------------------- files

std::string read_file_bytes(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw_bad_input(path, "is a directory, expected a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_bad_input(path, std::string("cannot open: ") + std::strerror(errno));
  in.seekg(0, std::ios::end);
  std::streamoff size = in.tellg();
  if (size < 0) throw_bad_input(path, "cannot determine file size");
  if (static_cast<uint64_t>(size) > max_bytes)
    throw_bad_input(path, "file is " + std::to_string(size) + " bytes, over the limit of " + std::to_string(max_bytes));
  in.seekg(0);
  std::string bytes(static_cast<size_t>(size), '\0');
  if (size > 0 && !in.read(bytes.data(), size)) throw_bad_input(path, "read failed");
  return bytes;
}

void write_file_atomic(const std::string& path, const std::string& bytes) {
  fs::path target(path);
  fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  std::string tmpl = (dir / ("." + target.filename().string() + ".tmp.XXXXXX")).string();
  int fd = ::mkstemp(tmpl.data());
  if (fd < 0) throw_bad_input(path, std::string("cannot create a temporary file: ") + std::strerror(errno));
  auto fail = [&](const char* what) {
    int err = errno;
    ::close(fd);
    ::unlink(tmpl.c_str());
    throw_bad_input(path, std::string(what) + ": " + std::strerror(err));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("write failed");
    }
    done += static_cast<size_t>(w);
  }
  ::fchmod(fd, 0644);
  if (::fsync(fd) != 0) fail("fsync failed");
  if (::close(fd) != 0) {
    ::unlink(tmpl.c_str());
    throw_bad_input(path, std::string("close failed: ") + std::strerror(errno));
  }
  if (::rename(tmpl.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmpl.c_str());
    throw_bad_input(path, std::string("rename failed: ") + std::strerror(err));
  }
  // Make the rename itself durable.
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

// ---------------------------------------------------------------- tensors in

namespace {

struct Ctx {
  std::string where;     // file name
  std::string base_dir;  // for external data; "" forbids it
  const ImportLimits* limits;
  uint64_t file_bytes;
};

std::vector<int64_t> checked_dims(const onnx::TensorProto& p, const Ctx& c, const std::string& at) {
  if (p.dims_size() > c.limits->max_rank)
    throw_bad_input(
        at, "rank " + std::to_string(p.dims_size()) + " exceeds the limit of " + std::to_string(c.limits->max_rank));
  std::vector<int64_t> dims;
  int64_t n = 1;
  for (int64_t d : p.dims()) {
    if (d < 0) throw_bad_input(at, "negative dimension " + std::to_string(d));
    if (d > c.limits->max_dim) throw_bad_input(at, "dimension " + std::to_string(d) + " exceeds the limit");
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) throw_bad_input(at, "element count overflows");
    n *= d;
    dims.push_back(d);
  }
  return dims;
}

template <typename Field>
void check_count(const Field& f, int64_t n, const std::string& at, const char* field) {
  if (static_cast<int64_t>(f.size()) != n)
    throw_bad_input(
        at, std::string(field) + " holds " + std::to_string(f.size()) + " values, dims need " + std::to_string(n));
}

// Whether an int32_data entry is representable in `dtype` (int32, int16, int8, uint16,
// uint8 or bool, the types ONNX stores there); bool takes any value as v != 0.
bool int32_data_fits(DataType dtype, int32_t v) {
  auto in = [v](auto lo_hi) {
    using T = decltype(lo_hi);
    return v >= static_cast<int32_t>(std::numeric_limits<T>::min()) &&
           v <= static_cast<int32_t>(std::numeric_limits<T>::max());
  };
  switch (dtype) {
    case DataType::Int8:
      return in(int8_t{});
    case DataType::UInt8:
      return in(uint8_t{});
    case DataType::Int16:
      return in(int16_t{});
    case DataType::UInt16:
      return in(uint16_t{});
    default:
      return true;
  }
}

std::string read_external(const onnx::TensorProto& p, const Ctx& c, const std::string& at, uint64_t want) {
  if (c.base_dir.empty()) throw_bad_input(at, "external data is not allowed here");
  std::string location;
  uint64_t offset = 0;
  int64_t length = -1;
  for (const auto& kv : p.external_data()) {
    try {
      if (kv.key() == "location")
        location = kv.value();
      else if (kv.key() == "offset")
        offset = std::stoull(kv.value());
      else if (kv.key() == "length")
        length = std::stoll(kv.value());
    } catch (const std::exception&) {
      throw_bad_input(at, "external_data '" + kv.key() + "' is not a number: '" + kv.value() + "'");
    }
  }
  if (location.empty()) throw_bad_input(at, "external data without a location");
  fs::path rel(location);
  if (rel.is_absolute()) throw_bad_input(at, "external data path '" + location + "' is absolute");
  for (const auto& part : rel)
    if (part == "..") throw_bad_input(at, "external data path '" + location + "' leaves the model's folder");
  std::error_code ec;
  fs::path base = fs::weakly_canonical(c.base_dir, ec);
  fs::path full = fs::weakly_canonical(fs::path(c.base_dir) / rel, ec);
  if (ec) throw_bad_input(at, "external data file '" + location + "' cannot be resolved");
  auto [b, f] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (b != base.end()) throw_bad_input(at, "external data file '" + location + "' resolves outside the model's folder");
  if (length >= 0 && static_cast<uint64_t>(length) != want)
    throw_bad_input(at, "external data length " + std::to_string(length) + " does not match dims (" +
                            std::to_string(want) + " bytes)");
  uint64_t size = fs::file_size(full, ec);
  if (ec) throw_bad_input(at, "external data file '" + location + "' cannot be read");
  if (offset > size || size - offset < want)
    throw_bad_input(at, "external data file '" + location + "' is " + std::to_string(size) +
                            " bytes, too short for offset " + std::to_string(offset) + " + " + std::to_string(want) +
                            " bytes");
  std::ifstream in(full, std::ios::binary);
  std::string bytes(want, '\0');
  in.seekg(static_cast<std::streamoff>(offset));
  if (!in.read(bytes.data(), static_cast<std::streamsize>(want)))
    throw_bad_input(at, "reading external data file '" + location + "' failed");
  return bytes;
}

Tensor tensor_from_proto(const onnx::TensorProto& p, const Ctx& c, const std::string& at) {
  auto dtype = static_cast<DataType>(p.data_type());
  if (dtype == DataType::Undefined) throw_bad_input(at, "tensor has no data_type (not a TensorProto?)");
  if (!dtype_is_supported(dtype))
    throw_unsupported(
        at, "tensor data type " + std::to_string(p.data_type()) + " (" + dtype_name(dtype) + ") is not supported");
  if (p.has_segment()) throw_unsupported(at, "segmented tensors are not supported");
  std::vector<int64_t> dims = checked_dims(p, c, at);
  int64_t n = element_count(dims);
  const uint64_t esize = dtype_size(dtype);
  if (static_cast<uint64_t>(n) > c.limits->max_tensor_bytes / esize)
    throw_bad_input(at, "tensor of " + std::to_string(n) + " elements exceeds the size limit");
  const uint64_t nbytes = static_cast<uint64_t>(n) * esize;
  const bool external = p.data_location() == onnx::TensorProto::EXTERNAL;
  // Inline data lives in the file: more bytes than the file has is a lie.
  if (!external && nbytes > c.file_bytes && n > 0 && (p.has_raw_data() || nbytes / 8 > c.file_bytes))
    throw_bad_input(at, "tensor claims " + std::to_string(nbytes) + " bytes, more than the whole file (" +
                            std::to_string(c.file_bytes) + ")");
  Tensor t(dtype, dims);
  if (external) {
    std::string bytes = read_external(p, c, at, nbytes);
    std::memcpy(t.raw(), bytes.data(), nbytes);
    return t;
  }
  if (p.has_raw_data()) {
    if (p.raw_data().size() != nbytes)
      throw_bad_input(at, "raw_data has " + std::to_string(p.raw_data().size()) + " bytes, dims " +
                              dims_to_string(dims) + " of " + dtype_name(dtype) + " need " + std::to_string(nbytes));
    if (nbytes) std::memcpy(t.raw(), p.raw_data().data(), nbytes);
    return t;
  }
  switch (dtype) {
    case DataType::Float32:
      check_count(p.float_data(), n, at, "float_data");
      std::copy(p.float_data().begin(), p.float_data().end(), t.data<float>());
      break;
    case DataType::Float64:
      check_count(p.double_data(), n, at, "double_data");
      std::copy(p.double_data().begin(), p.double_data().end(), t.data<double>());
      break;
    case DataType::Int64:
      check_count(p.int64_data(), n, at, "int64_data");
      std::copy(p.int64_data().begin(), p.int64_data().end(), t.data<int64_t>());
      break;
    case DataType::UInt32:
    case DataType::UInt64:
      check_count(p.uint64_data(), n, at, "uint64_data");
      for (int64_t i = 0; i < n; ++i) {
        const uint64_t v = p.uint64_data(static_cast<int>(i));
        if (dtype == DataType::UInt64) {
          t.data<uint64_t>()[i] = v;  // exact: never through a double
        } else {
          if (v > UINT32_MAX) throw_bad_input(at, "uint64_data value " + std::to_string(v) + " does not fit uint32");
          t.data<uint32_t>()[i] = static_cast<uint32_t>(v);
        }
      }
      break;
    case DataType::Float16:
    case DataType::BFloat16:
      // 16-bit floats are stored as their bit patterns in int32_data.
      check_count(p.int32_data(), n, at, "int32_data");
      for (int64_t i = 0; i < n; ++i) t.data<uint16_t>()[i] = static_cast<uint16_t>(p.int32_data(static_cast<int>(i)));
      break;
    default:  // int32, int16, int8, uint16, uint8, bool
      check_count(p.int32_data(), n, at, "int32_data");
      for (int64_t i = 0; i < n; ++i) {
        const int32_t v = p.int32_data(static_cast<int>(i));
        // Range first: converting an out-of-range value to a narrower integer type
        // before checking it would already be undefined behaviour.
        if (!int32_data_fits(dtype, v))
          throw_bad_input(at, "int32_data value " + std::to_string(v) + " does not fit " + dtype_name(dtype));
        t.set_from_double(i, v);
      }
      break;
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.dims()) p->add_dims(d);
  p->set_raw_data(reinterpret_cast<const char*>(t.raw()), t.nbytes());
}

ValueInfo value_info_from_proto(const onnx::ValueInfoProto& v, const Ctx& c, const std::string& at) {
  ValueInfo info;
  if (!v.has_type()) return info;
  if (!v.type().has_tensor_type())
    throw_unsupported(at, "value '" + v.name() + "' is not a tensor (sequences, maps and optionals are not supported)");
  const auto& tt = v.type().tensor_type();
  info.dtype = static_cast<DataType>(tt.elem_type());
  if (!dtype_is_supported(info.dtype) && info.dtype != DataType::Undefined)
    throw_unsupported(at, "value '" + v.name() + "' has unsupported element type " + std::to_string(tt.elem_type()));
  if (tt.has_shape()) {
    if (tt.shape().dim_size() > c.limits->max_rank)
      throw_bad_input(at, "value '" + v.name() + "' has rank " + std::to_string(tt.shape().dim_size()) +
                              ", over the limit of " + std::to_string(c.limits->max_rank));
    Shape s;
    for (const auto& d : tt.shape().dim()) {
      if (d.has_dim_value()) {
        if (d.dim_value() < 0 || d.dim_value() > c.limits->max_dim)
          throw_bad_input(at, "value '" + v.name() + "' has dimension " + std::to_string(d.dim_value()) +
                                  " outside [0, " + std::to_string(c.limits->max_dim) + "]");
        s.push_back(Dim::of(d.dim_value()));
      } else {
        s.push_back(Dim::sym(d.dim_param()));
      }
    }
    info.shape = std::move(s);
  }
  return info;
}

void value_info_to_proto(const std::string& name, const ValueInfo& info, onnx::ValueInfoProto* p) {
  p->set_name(name);
  auto* tt = p->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(static_cast<int32_t>(info.dtype));
  if (!info.shape) return;
  auto* shape = tt->mutable_shape();
  for (const Dim& d : *info.shape) {
    auto* pd = shape->add_dim();
    if (d.known())
      pd->set_dim_value(d.value);
    else if (!d.symbol.empty())
      pd->set_dim_param(d.symbol);
  }
}

Attribute attribute_from_proto(const onnx::AttributeProto& a, const Ctx& c, const std::string& at) {
  const std::string here = at + ": attribute '" + a.name() + "'";
  switch (a.type()) {
    case onnx::AttributeProto::FLOAT:
      return Attribute::of_float(a.f());
    case onnx::AttributeProto::INT:
      return Attribute::of_int(a.i());
    case onnx::AttributeProto::STRING:
      return Attribute::of_string(a.s());
    case onnx::AttributeProto::TENSOR:
      return Attribute::of_tensor(tensor_from_proto(a.t(), c, here));
    case onnx::AttributeProto::FLOATS:
      return Attribute::of_floats({a.floats().begin(), a.floats().end()});
    case onnx::AttributeProto::INTS:
      return Attribute::of_ints({a.ints().begin(), a.ints().end()});
    case onnx::AttributeProto::STRINGS: {
      Attribute r;
      r.kind = Attribute::Kind::Strings;
      r.strings.assign(a.strings().begin(), a.strings().end());
      return r;
    }
    case onnx::AttributeProto::GRAPH:
    case onnx::AttributeProto::GRAPHS:
      throw_unsupported(here, "subgraph attributes (If, Loop, Scan) are not supported");
    default:
      if (!a.ref_attr_name().empty()) throw_unsupported(here, "attribute references are only valid inside functions");
      throw_bad_input(here, "has no valid type (" + std::to_string(a.type()) + ")");
  }
}

void attribute_to_proto(const std::string& name, const Attribute& a, onnx::AttributeProto* p) {
  p->set_name(name);
  switch (a.kind) {
    case Attribute::Kind::Float:
      p->set_type(onnx::AttributeProto::FLOAT);
      p->set_f(a.f);
      break;
    case Attribute::Kind::Int:
      p->set_type(onnx::AttributeProto::INT);
      p->set_i(a.i);
      break;
    case Attribute::Kind::String:
      p->set_type(onnx::AttributeProto::STRING);
      p->set_s(a.s);
      break;
    case Attribute::Kind::Tensor:
      p->set_type(onnx::AttributeProto::TENSOR);
      tensor_to_proto(a.t, "", p->mutable_t());
      break;
    case Attribute::Kind::Floats:
      p->set_type(onnx::AttributeProto::FLOATS);
      for (float f : a.floats) p->add_floats(f);
      break;
    case Attribute::Kind::Ints:
      p->set_type(onnx::AttributeProto::INTS);
      for (int64_t i : a.ints) p->add_ints(i);
      break;
    case Attribute::Kind::Strings:
      p->set_type(onnx::AttributeProto::STRINGS);
      for (const auto& s : a.strings) p->add_strings(s);
      break;
  }
}

template <typename Msg>
void parse_proto(Msg& msg, const std::string& bytes, const std::string& where, const char* what) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()),
                                            static_cast<int>(std::min<size_t>(bytes.size(), INT32_MAX)));
  in.SetTotalBytesLimit(INT32_MAX);
  in.SetRecursionLimit(64);
  if (bytes.size() > static_cast<size_t>(INT32_MAX))
    throw_unsupported(where, "files over 2 GiB must keep their tensors as external data");
  if (!msg.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
    throw_bad_input(where, std::string("is not a valid ") + what + " (protobuf parse failed: truncated or not ONNX)");
}

}  // namespace

Graph parse_onnx_bytes(const std::string& bytes, const std::string& where, const std::string& base_dir,
                       const ImportLimits& limits) {
  if (bytes.empty()) throw_bad_input(where, "file is empty, not an ONNX model");
  onnx::ModelProto m;
  parse_proto(m, bytes, where, "ONNX model");
  if (!m.has_ir_version() || !m.has_graph()) throw_bad_input(where, "is not an ONNX model (no ir_version or no graph)");
  if (m.ir_version() < 3 || m.ir_version() > 10)
    throw_unsupported(where, "ONNX IR version " + std::to_string(m.ir_version()) + " is not supported (3..10)");
  const onnx::GraphProto& gp = m.graph();
  if (static_cast<uint64_t>(gp.node_size()) > limits.max_nodes)
    throw_bad_input(where, "graph has " + std::to_string(gp.node_size()) + " nodes, over the limit");
  if (m.functions_size() > 0) throw_unsupported(where, "model-local functions are not supported");

  Ctx c{where, base_dir, &limits, bytes.size()};
  Graph g;
  g.name = gp.name();
  g.ir_version = m.ir_version();
  g.producer_name = m.producer_name();
  g.producer_version = m.producer_version();
  g.doc_string = gp.doc_string();
  for (const auto& kv : m.metadata_props()) g.metadata.emplace_back(kv.key(), kv.value());
  for (const auto& op : m.opset_import()) {
    if (op.version() < 1)
      throw_bad_input(where, "opset_import for '" + op.domain() + "' has version " + std::to_string(op.version()));
    g.opsets[canonical_domain(op.domain())] = op.version();
  }

  for (int i = 0; i < gp.initializer_size(); ++i) {
    const auto& t = gp.initializer(i);
    std::string at = where + ": initializer " + std::to_string(i) + " '" + t.name() + "'";
    if (t.name().empty()) throw_bad_input(at, "has no name");
    if (g.initializers.count(t.name())) throw_bad_input(at, "is defined twice");
    Tensor tensor = tensor_from_proto(t, c, at);
    g.values[t.name()] = ValueInfo{tensor.dtype(), shape_of(tensor.dims())};
    g.initializers.emplace(t.name(), std::move(tensor));
  }
  if (gp.sparse_initializer_size() > 0) throw_unsupported(where, "sparse initializers are not supported");

  for (int i = 0; i < gp.input_size(); ++i) {
    const auto& v = gp.input(i);
    std::string at = where + ": graph input " + std::to_string(i) + " '" + v.name() + "'";
    if (v.name().empty()) throw_bad_input(at, "has no name");
    if (g.initializers.count(v.name())) {
      g.initializer_inputs.push_back(v.name());
      continue;
    }
    ValueInfo info = value_info_from_proto(v, c, at);
    if (info.dtype == DataType::Undefined) throw_bad_input(at, "has no element type");
    g.values[v.name()] = info;
    g.inputs.push_back(v.name());
  }
  for (int i = 0; i < gp.node_size(); ++i) {
    const auto& np = gp.node(i);
    Node n;
    n.name = np.name().empty() ? np.op_type() + "_" + std::to_string(i) : np.name();
    n.op_type = np.op_type();
    n.domain = canonical_domain(np.domain());
    n.doc_string = np.doc_string();
    std::string at = where + ": " + describe_node(n, static_cast<size_t>(i));
    if (n.op_type.empty()) throw_bad_input(at, "has no op_type");
    n.inputs.assign(np.input().begin(), np.input().end());
    n.outputs.assign(np.output().begin(), np.output().end());
    for (const auto& a : np.attribute()) {
      if (n.attrs.count(a.name())) throw_bad_input(at, "attribute '" + a.name() + "' is given twice");
      n.attrs[a.name()] = attribute_from_proto(a, c, at);
    }
    g.nodes.push_back(std::move(n));
  }
  for (int i = 0; i < gp.output_size(); ++i) g.outputs.push_back(gp.output(i).name());
  return g;
}

Graph import_onnx_bytes(const std::string& bytes, const std::string& where, const std::string& base_dir,
                        const OpRegistry& reg, const ImportLimits& limits) {
  Graph g = parse_onnx_bytes(bytes, where, base_dir, limits);
  // Declared types of outputs and intermediates, checked against inference.
  onnx::ModelProto m;
  parse_proto(m, bytes, where, "ONNX model");
  Ctx c{where, base_dir, &limits, bytes.size()};
  std::unordered_map<std::string, ValueInfo> declared;
  for (const auto& v : m.graph().output())
    declared[v.name()] = value_info_from_proto(v, c, where + ": graph output '" + v.name() + "'");
  for (const auto& v : m.graph().value_info())
    declared[v.name()] = value_info_from_proto(v, c, where + ": value_info '" + v.name() + "'");
  validate_graph(g, reg, where);
  g.sort_topologically();
  infer_shapes(g, reg, where, declared);
  // LSTM, GRU and RNN become existing ops here, before anything runs or differentiates them.
  if (expand_recurrent(g, where) > 0) infer_shapes(g, reg, where, declared);
  return g;
}

Graph import_onnx_file(const std::string& path, const OpRegistry& reg, const ImportLimits& limits) {
  std::string bytes = read_file_bytes(path, limits.max_file_bytes);
  fs::path dir = fs::path(path).has_parent_path() ? fs::path(path).parent_path() : fs::path(".");
  return import_onnx_bytes(bytes, path, dir.string(), reg, limits);
}

std::string export_onnx_bytes(const Graph& g) {
  onnx::ModelProto m;
  m.set_ir_version(g.ir_version);
  m.set_producer_name(g.producer_name.empty() ? "trainrt" : g.producer_name);
  m.set_producer_version(g.producer_version);
  for (const auto& [k, v] : g.metadata) {
    auto* kv = m.add_metadata_props();
    kv->set_key(k);
    kv->set_value(v);
  }
  for (const auto& [domain, version] : g.opsets) {
    auto* op = m.add_opset_import();
    op->set_domain(domain);
    op->set_version(version);
  }
  onnx::GraphProto* gp = m.mutable_graph();
  gp->set_name(g.name.empty() ? "trainrt" : g.name);
  if (!g.doc_string.empty()) gp->set_doc_string(g.doc_string);
  for (const std::string& in : g.inputs) value_info_to_proto(in, g.info(in), gp->add_input());
  for (const std::string& in : g.initializer_inputs)
    if (g.is_initializer(in)) value_info_to_proto(in, g.info(in), gp->add_input());
  for (const std::string& out : g.outputs) {
    const ValueInfo* info = g.find_info(out);
    value_info_to_proto(out, info ? *info : ValueInfo{}, gp->add_output());
  }
  for (const auto& [name, t] : g.initializers) tensor_to_proto(t, name, gp->add_initializer());
  for (const Node& n : g.nodes) {
    auto* np = gp->add_node();
    np->set_name(n.name);
    np->set_op_type(n.op_type);
    if (!n.domain.empty()) np->set_domain(n.domain);
    if (!n.doc_string.empty()) np->set_doc_string(n.doc_string);
    for (const auto& in : n.inputs) np->add_input(in);
    for (const auto& out : n.outputs) np->add_output(out);
    for (const auto& [key, a] : n.attrs) attribute_to_proto(key, a, np->add_attribute());
  }
  std::string bytes;
  if (!m.SerializeToString(&bytes)) throw_internal("export", "protobuf serialisation failed (model over 2 GiB?)");
  return bytes;
}

void export_onnx_file(const Graph& g, const std::string& path) { write_file_atomic(path, export_onnx_bytes(g)); }

Tensor read_tensor_file(const std::string& path, const ImportLimits& limits) {
  std::string bytes = read_file_bytes(path, limits.max_file_bytes);
  onnx::TensorProto p;
  parse_proto(p, bytes, path, "ONNX TensorProto file");
  Ctx c{path, "", &limits, bytes.size()};
  return tensor_from_proto(p, c, path);
}

void write_tensor_file(const Tensor& t, const std::string& path, const std::string& name) {
  onnx::TensorProto p;
  tensor_to_proto(t, name, &p);
  std::string bytes;
  if (!p.SerializeToString(&bytes)) throw_internal(path, "protobuf serialisation failed");
  write_file_atomic(path, bytes);
}

}  // namespace trainrt
