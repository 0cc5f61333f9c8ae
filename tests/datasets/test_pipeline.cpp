// Input pipeline: epoch order, DistributedSampler shards, crop/flip/normalise on
// hand-made images, determinism under threading, errors and early stop.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "datasets/pipeline.h"
#include "graph/error.h"

using namespace trainrt;

namespace {

// n images C x H x W, pixel (i, c, y, x) = (i*7 + c*31 + y*W + x) % 256, label i % classes.
Dataset make_dataset(int64_t n, int64_t C, int64_t H, int64_t W, int64_t classes = 10) {
  Dataset d;
  d.name = "synthetic";
  d.source = "synthetic.bin";
  d.classes = classes;
  d.images = Tensor(DataType::UInt8, {n, C, H, W});
  d.labels = Tensor(DataType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) {
    d.labels.data<int64_t>()[i] = i % classes;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t p = 0; p < H * W; ++p)
        d.images.data<uint8_t>()[(i * C + c) * H * W + p] = static_cast<uint8_t>((i * 7 + c * 31 + p) % 256);
  }
  for (int64_t c = 0; c < C; ++c) {
    d.mean.push_back(0.4f + 0.05f * static_cast<float>(c));
    d.std.push_back(0.25f + 0.01f * static_cast<float>(c));
  }
  return d;
}

float norm(const Dataset& d, int64_t c, int v) { return (static_cast<float>(v) / 255.f - d.mean[c]) / d.std[c]; }

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<int64_t> all_samples(BatchStream& s) {
  std::vector<int64_t> out;
  while (auto b = s.next()) out.insert(out.end(), b->samples.begin(), b->samples.end());
  return out;
}

}  // namespace

TEST_CASE("epoch order: a seeded permutation, new each epoch, identity without shuffle") {
  const int64_t n = 1000;
  std::vector<int64_t> a = epoch_order(n, 42, 0, true);
  CHECK(a == epoch_order(n, 42, 0, true));
  CHECK(a != epoch_order(n, 42, 1, true));
  CHECK(a != epoch_order(n, 43, 0, true));
  std::vector<int64_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> id = epoch_order(n, 42, 0, false);
  CHECK(sorted == id);
  for (int64_t i = 0; i < n; ++i) CHECK(id[i] == i);
  int64_t fixed = 0;  // a random permutation has ~1 fixed point
  for (int64_t i = 0; i < n; ++i) fixed += a[i] == i;
  CHECK(fixed < 10);
  CHECK(epoch_order(0, 1, 0, true).empty());
  CHECK(epoch_order(1, 1, 0, true) == std::vector<int64_t>{0});
}

TEST_CASE("DistributedSampler shards: equal counts, disjoint up to the padding, covering the epoch") {
  for (int64_t n : {1, 7, 10, 12, 100, 101}) {
    for (int64_t world : {1, 2, 3, 4, 8}) {
      CAPTURE(n);
      CAPTURE(world);
      std::vector<int64_t> order = epoch_order(n, 5, 3, true);
      const int64_t per_rank = (n + world - 1) / world, padding = per_rank * world - n;
      std::multiset<int64_t> seen;
      for (int64_t r = 0; r < world; ++r) {
        std::vector<int64_t> mine = shard(order, r, world);
        CHECK(static_cast<int64_t>(mine.size()) == per_rank);
        for (size_t j = 0; j < mine.size(); ++j) {
          CHECK(mine[j] == order[(r + static_cast<int64_t>(j) * world) % n]);  // r, r+W, ...
          seen.insert(mine[j]);
        }
      }
      // Every sample appears; only the padding (order[0], order[1], ... repeated) appears twice.
      for (int64_t i = 0; i < n; ++i) CHECK(seen.count(i) >= 1);
      int64_t repeats = 0;
      for (int64_t i = 0; i < n; ++i) repeats += static_cast<int64_t>(seen.count(i)) - 1;
      CHECK(repeats == padding);
    }
  }
  std::vector<int64_t> order = epoch_order(10, 0, 0, false);
  CHECK(shard(order, 1, 4) == std::vector<int64_t>{1, 5, 9});
  CHECK(shard(order, 3, 4) == std::vector<int64_t>{3, 7, 1});  // padded with order[0..1]
  CHECK_THROWS_AS(shard(order, 4, 4), Error);
}

TEST_CASE("batches: drop_last for training, the last partial batch kept for evaluation") {
  Dataset d = make_dataset(10, 1, 4, 4);
  PipelineOptions o;
  o.batch_size = 4;
  o.seed = 9;
  BatchStream train(d, o);
  CHECK(train.size() == 2);
  std::vector<int64_t> got = all_samples(train);
  std::vector<int64_t> want = epoch_samples(10, o);
  CHECK(got == std::vector<int64_t>(want.begin(), want.begin() + 8));

  const int64_t created_ns = steady_ns();
  BatchStream eval(d, eval_options(4));
  CHECK(eval.size() == 3);
  std::vector<int64_t> sizes;
  int64_t expect_index = 0;
  while (auto b = eval.next()) {
    const int64_t received_ns = steady_ns();
    CHECK(b->index == expect_index++);
    sizes.push_back(b->labels.dims()[0]);
    CHECK(b->images.dims() == std::vector<int64_t>{b->labels.dims()[0], 1, 4, 4});
    CHECK(b->images.dtype() == DataType::Float32);
    CHECK(b->labels.dtype() == DataType::Int64);
    // The timings are measured, on the steady clock the trace uses: building a batch
    // takes time, and it happened after the stream was made and before next() returned.
    CHECK(b->prepare_seconds > 0);
    CHECK(b->prepare_start_ns >= created_ns);
    CHECK(b->prepare_end_ns > b->prepare_start_ns);
    CHECK(b->prepare_end_ns <= received_ns);
    CHECK(b->prepare_end_ns - b->prepare_start_ns == static_cast<int64_t>(b->prepare_seconds * 1e9));
    CHECK(b->wait_seconds >= 0);
    CHECK(b->wait_seconds * 1e9 <= static_cast<double>(received_ns - created_ns));
  }
  CHECK(sizes == std::vector<int64_t>{4, 4, 2});
  CHECK(!eval.next());

  PipelineOptions seed_test = eval_options(4);  // the seed's test loader: drop_last=True
  seed_test.drop_last = true;
  BatchStream s(d, seed_test);
  CHECK(all_samples(s) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});

  PipelineOptions big;
  big.batch_size = 11;
  BatchStream none(d, big);  // fewer samples than one batch with drop_last: an empty epoch
  CHECK(none.size() == 0);
  CHECK(!none.next());
}

TEST_CASE("ranks of one epoch read disjoint shards through the stream") {
  Dataset d = make_dataset(64, 1, 2, 2);
  std::set<int64_t> seen;
  for (int64_t r = 0; r < 4; ++r) {
    PipelineOptions o;
    o.batch_size = 4;
    o.seed = 1;
    o.epoch = 2;
    o.rank = r;
    o.world = 4;
    BatchStream s(d, o);
    CHECK(s.size() == 4);
    for (int64_t i : all_samples(s)) CHECK(seen.insert(i).second);
  }
  CHECK(seen.size() == 64);
}

TEST_CASE("normalisation: (x/255 - mean)/std per channel, labels copied") {
  Dataset d = make_dataset(3, 3, 5, 6, 2);
  BatchStream s(d, eval_options(3));
  auto b = s.next();
  REQUIRE(b);
  const float* x = b->images.data<float>();
  for (int64_t i = 0; i < 3; ++i) {
    CHECK(b->labels.data<int64_t>()[i] == i % 2);
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t p = 0; p < 30; ++p)
        CHECK(x[(i * 3 + c) * 30 + p] == doctest::Approx(norm(d, c, d.image(i)[c * 30 + p])).epsilon(1e-6));
  }
  CHECK(norm(d, 0, 0) == doctest::Approx(-1.6));  // (0 - 0.4) / 0.25
}

TEST_CASE("augmentation: flip reverses rows, the crop keeps the size and pads with (0-mean)/std") {
  const int64_t H = 32, W = 32, pad = 4;
  Dataset d = make_dataset(2, 3, H, W);
  std::vector<float> out(3 * H * W);
  const uint8_t* img = d.image(1);

  Augment flip{true, pad, pad};  // centred window: a pure flip
  prepare_sample(d, 1, &flip, pad, out.data());
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) CHECK(out[(c * H + y) * W + x] == norm(d, c, img[(c * H + y) * W + (W - 1 - x)]));

  Augment top_left{false, 0, 0};  // window at the padded corner: shifted down-right by 4
  prepare_sample(d, 1, &top_left, pad, out.data());
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        float want = (y < pad || x < pad) ? norm(d, c, 0) : norm(d, c, img[(c * H + y - pad) * W + x - pad]);
        CHECK(out[(c * H + y) * W + x] == want);
      }
  CHECK(out[0] == doctest::Approx((0 - d.mean[0]) / d.std[0]));

  for (Augment far : {Augment{false, 0, 0}, Augment{true, 80, 80}, Augment{true, 40, 0}}) {
    prepare_sample(d, 1, &far, 40, out.data());  // padding wider than the image: all padding
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t p = 0; p < H * W; ++p) REQUIRE(out[c * H * W + p] == norm(d, c, 0));
  }

  Augment bottom_right_flipped{true, 2 * pad, 2 * pad};
  prepare_sample(d, 1, &bottom_right_flipped, pad, out.data());
  for (int64_t y = 0; y < H; ++y)
    for (int64_t x = 0; x < W; ++x) {
      int64_t sy = y + pad, sx = x + pad;  // in the flipped image
      float want = (sy >= H || sx >= W) ? norm(d, 0, 0) : norm(d, 0, img[sy * W + (W - 1 - sx)]);
      CHECK(out[y * W + x] == want);
    }
}

TEST_CASE("augmentation draws: per (seed, epoch, sample), flip p=0.5, offsets uniform in [0, 2*pad]") {
  int64_t flips = 0;
  std::vector<int64_t> dy(9), dx(9);
  const int64_t n = 9000;
  for (int64_t i = 0; i < n; ++i) {
    Augment a = draw_augment(3, 1, i, 4);
    Augment again = draw_augment(3, 1, i, 4);
    CHECK(a.flip == again.flip);
    CHECK(a.dy == again.dy);
    REQUIRE(a.dy >= 0);
    REQUIRE(a.dy <= 8);
    REQUIRE(a.dx >= 0);
    REQUIRE(a.dx <= 8);
    flips += a.flip;
    dy[a.dy]++;
    dx[a.dx]++;
  }
  CHECK(std::abs(flips - n / 2) < 300);  // ~6 sigma
  for (int64_t k = 0; k < 9; ++k) {
    CHECK(std::abs(dy[k] - n / 9) < 200);
    CHECK(std::abs(dx[k] - n / 9) < 200);
  }
  int64_t same = 0;
  for (int64_t i = 0; i < 100; ++i) {
    Augment a = draw_augment(3, 1, i, 4), b = draw_augment(3, 2, i, 4);
    same += a.flip == b.flip && a.dy == b.dy && a.dx == b.dx;
  }
  CHECK(same < 10);
}

TEST_CASE("augmented stream: the same batches whatever the prefetch depth and thread timing") {
  Dataset d = make_dataset(50, 3, 8, 8);
  auto run = [&](int64_t prefetch, int64_t epoch) {
    PipelineOptions o;
    o.batch_size = 7;
    o.seed = 11;
    o.epoch = epoch;
    o.augment = true;
    o.prefetch = prefetch;
    BatchStream s(d, o);
    std::vector<float> all;
    while (auto b = s.next())
      all.insert(all.end(), b->images.data<float>(), b->images.data<float>() + b->images.numel());
    return all;
  };
  std::vector<float> a = run(1, 0);
  CHECK(a.size() == 49 * 3 * 64);
  CHECK(a == run(8, 0));
  CHECK(a == run(3, 0));
  CHECK(a != run(3, 1));

  // Each row is prepare_sample with that sample's own draw.
  PipelineOptions o;
  o.batch_size = 5;
  o.seed = 11;
  o.augment = true;
  BatchStream s(d, o);
  auto b = s.next();
  REQUIRE(b);
  std::vector<float> row(3 * 64);
  for (int64_t j = 0; j < 5; ++j) {
    Augment aug = draw_augment(11, 0, b->samples[j], 4);
    prepare_sample(d, b->samples[j], &aug, 4, row.data());
    CHECK(std::equal(row.begin(), row.end(), b->images.data<float>() + j * 3 * 64));
  }
}

TEST_CASE("PipelineOptions::allocate: batches written in the caller's memory, the same values as on the heap") {
  // The memory is handed out dirty (NaN), as a recycled pinned buffer would be: every
  // element of the images and labels must be written, with the heap path's values.
  Dataset d = make_dataset(50, 3, 8, 8);
  auto run = [&](bool own_memory, size_t* taken) {
    PipelineOptions o;
    o.batch_size = 7;
    o.seed = 11;
    o.augment = true;
    o.drop_last = false;
    std::set<const std::byte*> given;
    std::mutex mu;
    if (own_memory)
      o.allocate = [&](size_t bytes) {
        std::shared_ptr<std::byte[]> b(new std::byte[bytes]);
        std::fill_n(reinterpret_cast<float*>(b.get()), bytes / sizeof(float), std::nanf(""));
        std::lock_guard<std::mutex> lock(mu);
        given.insert(b.get());
        ++*taken;
        return b;
      };
    BatchStream s(d, o);
    std::vector<float> images;
    std::vector<int64_t> labels;
    while (auto b = s.next()) {
      if (own_memory) {
        std::lock_guard<std::mutex> lock(mu);
        CHECK(given.count(b->images.raw()) == 1);
        CHECK(given.count(b->labels.raw()) == 1);
      }
      images.insert(images.end(), b->images.data<float>(), b->images.data<float>() + b->images.numel());
      labels.insert(labels.end(), b->labels.data<int64_t>(), b->labels.data<int64_t>() + b->labels.numel());
    }
    return std::make_pair(images, labels);
  };
  size_t taken = 0;
  const auto heap = run(false, &taken);
  const auto own = run(true, &taken);
  CHECK(taken == 2 * 8);  // images and labels of 8 batches (7 of 7, the last of 1)
  CHECK(heap.first.size() == 50 * 3 * 64);
  CHECK(std::equal(heap.first.begin(), heap.first.end(), own.first.begin(), own.first.end(),
                   [](float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }));
  CHECK(heap.second == own.second);
}

TEST_CASE("first_batch (resume mid-epoch): the remaining batches of the full epoch, numbered as there") {
  Dataset d = make_dataset(50, 3, 8, 8);
  auto batches = [&](int64_t first, int64_t prefetch) {
    PipelineOptions o;
    o.batch_size = 7;
    o.seed = 5;
    o.epoch = 2;
    o.augment = true;
    o.prefetch = prefetch;
    o.first_batch = first;
    BatchStream s(d, o);
    std::vector<Batch> out;
    while (auto b = s.next()) out.push_back(std::move(*b));
    return out;
  };
  const std::vector<Batch> full = batches(0, 4);
  REQUIRE(full.size() == 7);
  for (int64_t first : {1, 3, 6, 7, 9}) {
    for (int64_t prefetch : {1, 4}) {
      INFO("first " << first << " prefetch " << prefetch);
      const std::vector<Batch> rest = batches(first, prefetch);
      REQUIRE(static_cast<int64_t>(rest.size()) == std::max<int64_t>(0, 7 - first));
      for (size_t j = 0; j < rest.size(); ++j) {
        const Batch& want = full[static_cast<size_t>(first) + j];
        CHECK(rest[j].index == want.index);
        CHECK(rest[j].samples == want.samples);
        CHECK(std::equal(want.images.data<float>(), want.images.data<float>() + want.images.numel(),
                         rest[j].images.data<float>()));
      }
    }
  }
}

TEST_CASE("a bad sample surfaces in next() as the same BadInput error") {
  Dataset d = make_dataset(20, 1, 2, 2);
  d.labels.data<int64_t>()[5] = 12;
  PipelineOptions o = eval_options(2);
  o.prefetch = 6;  // the bad batch (2) is prepared before the consumer asks for it
  BatchStream s(d, o);
  CHECK(s.next());
  CHECK(s.next());
  try {
    s.next();
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::BadInput);
    CHECK(std::string(e.what()) == "synthetic.bin: sample 5: label 12 is out of range [0, 10)");
  }
  CHECK(!s.next());  // the stream ends with its first error
}

TEST_CASE("stopping early does not hang or leak") {
  Dataset d = make_dataset(4000, 3, 32, 32);
  PipelineOptions o;
  o.batch_size = 2;
  o.augment = true;
  o.prefetch = 16;
  for (int round = 0; round < 20; ++round) {
    BatchStream s(d, o);
    if (round % 2) CHECK(s.next());
  }  // destroyed with up to 16 batches queued or running
  { BatchStream untouched(d, o); }
  PipelineOptions bad;
  bad.batch_size = 0;
  CHECK_THROWS_AS(BatchStream(d, bad), Error);
}

// Throughput on the real Fashion-MNIST files; run with
//   ./build-ds/tests/test_datasets -ts='*bench*' --no-skip
TEST_CASE("bench: pipeline batches/s on Fashion-MNIST, batch 128" * doctest::skip()) {
  DatasetOptions dopt;
  if (!std::filesystem::exists(default_data_dir("fashion-mnist"))) return;
  auto t0 = std::chrono::steady_clock::now();
  Dataset d = load_dataset(dopt);
  double load = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto [augment, busy_ms] : {std::pair{false, 0}, std::pair{true, 0}, std::pair{true, 2}}) {
    PipelineOptions o;
    o.batch_size = 128;
    o.augment = augment;
    t0 = std::chrono::steady_clock::now();
    BatchStream s(d, o);
    int64_t n = 0;
    double prep = 0, wait = 0;
    while (auto b = s.next()) {
      ++n;
      if (busy_ms) std::this_thread::sleep_for(std::chrono::milliseconds(busy_ms));  // a stand-in for a step
      prep += b->prepare_seconds;
      wait += b->wait_seconds;
    }
    double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MESSAGE("load " << load << " s; augment=" << augment << ", consumer busy " << busy_ms << " ms: " << n
                    << " batches in " << t << " s = " << n / t << " batches/s (" << n * 128 / t
                    << " images/s); mean prepare " << 1e3 * prep / n << " ms, consumer wait " << 1e3 * wait / n
                    << " ms per batch");
  }
}
