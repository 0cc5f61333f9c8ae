// split_rows (ops/shape_ops.h): the row copies the cuda backend's Split hands
// cudaMemcpy2DAsync, one per output. Replayed here on the host (a 2-D copy: `outer` rows
// of `width` bytes, source rows `src_pitch` apart, destination rows dense) and compared
// with the reference Split, over random ranks, axes (negative ones too), part sizes
// (empty parts included), the split input, the opset 11 attribute and opset 18's
// num_outputs, and element widths of 1 to 8 bytes.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "ops/shape_ops.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// What cudaMemcpy2DAsync(dst, c.width, src + c.src_offset, c.src_pitch, c.width, c.outer) does.
void replay(const RowCopy& c, const std::byte* src, std::byte* dst) {
  for (int64_t r = 0; r < c.outer; ++r)
    if (c.width > 0)
      std::memcpy(dst + static_cast<size_t>(r) * c.width, src + c.src_offset + static_cast<size_t>(r) * c.src_pitch,
                  c.width);
}

}  // namespace

TEST_CASE("split_rows: replayed row copies equal the reference Split") {
  std::mt19937_64 rng(17);
  const DataType types[] = {DataType::Float32, DataType::Float64, DataType::Int64, DataType::UInt8, DataType::Int32};
  for (int it = 0; it < 40; ++it) {
    CAPTURE(it);
    const int64_t rank = pick(rng, 1, 4);
    std::vector<int64_t> xd(static_cast<size_t>(rank));
    for (auto& d : xd) d = pick(rng, 1, 4);
    const int64_t axis = pick(rng, -rank, rank - 1);
    const size_t a = static_cast<size_t>(axis < 0 ? axis + rank : axis);
    xd[a] = pick(rng, 2, 7);
    const int64_t count = pick(rng, 1, 3);
    const DataType t = types[it % 5];
    // Values every dtype holds (UInt8 takes no negative: converting one is undefined).
    const double lo = t == DataType::UInt8 ? 0.0 : -100.0;
    const Tensor xt = random_tensor(t, xd, 100 + static_cast<uint64_t>(it), lo, 100.0);

    std::vector<int64_t> sizes(static_cast<size_t>(count), 0);
    int64_t left = xd[a];
    for (int64_t i = 0; i + 1 < count; ++i) left -= (sizes[static_cast<size_t>(i)] = pick(rng, 0, left));
    sizes.back() = left;
    std::vector<std::string> outs;
    for (int64_t i = 0; i < count; ++i) outs.push_back("y" + std::to_string(i));
    const int mode = it % 3;  // split input (opset 13), split attribute (opset 11), num_outputs (opset 18)
    Node n = make_node("Split", {"x"}, outs, {{"axis", Attribute::of_int(axis)}});
    Graph g;
    if (mode == 0) {
      n.inputs.push_back("split");
      const Tensor split = make(DataType::Int64, {count}, std::vector<double>(sizes.begin(), sizes.end()));
      g = single_node_graph(n, {{"x", xt}}, {{"split", split}});
    } else if (mode == 1) {
      n.attrs["split"] = Attribute::of_ints(sizes);
      g = single_node_graph(n, {{"x", xt}}, {}, 11);
    } else {
      n.attrs["num_outputs"] = Attribute::of_int(count);
      g = single_node_graph(n, {{"x", xt}}, {}, 18);
    }
    const TensorMap want = run_graph(g, {{"x", xt}}, *make_backend("reference"));
    std::vector<int64_t> parts;
    for (const std::string& o : outs) parts.push_back(want.at(o).dims()[a]);
    if (mode != 2) CHECK(parts == sizes);
    const std::vector<RowCopy> rows = split_rows(xd, a, parts, dtype_size(t));
    REQUIRE(rows.size() == outs.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const Tensor& w = want.at(outs[i]);
      Tensor got(t, w.dims());
      CHECK(rows[i].width * static_cast<size_t>(rows[i].outer) == got.nbytes());
      replay(rows[i], xt.raw(), got.raw());
      CHECK(std::memcmp(got.raw(), w.raw(), got.nbytes()) == 0);
    }
  }
}
