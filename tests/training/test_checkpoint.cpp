// Checkpoint files: bit-exact round trip of tensors and trainer state, every
// single-byte corruption and every truncation refused (BadInput naming the file),
// folder listing/pruning by step, and the resume-flag comparison.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "test_util.h"
#include "training/checkpoint.h"

namespace fs = std::filesystem;
using namespace trainrt;
using trainrt::test::error_of;
using trainrt::test::random_tensor;

namespace {

using trainrt::test::TempDir;

Checkpoint sample_checkpoint() {
  Checkpoint c;
  c.state["conv.weight"] = random_tensor(DataType::Float32, {4, 1, 3, 3}, 1);
  Tensor odd(DataType::Float32, {3});
  odd.data<float>()[0] = -0.0f;
  odd.data<float>()[1] = std::numeric_limits<float>::denorm_min();
  odd.data<float>()[2] = 1.0f / 3.0f;
  c.state["bn.running_var"] = odd;
  Tensor step(DataType::Int64, {});
  step.data<int64_t>()[0] = 1234567890123;
  c.state["optimizer.step"] = step;
  c.state["empty"] = Tensor(DataType::Float32, {0, 5});
  c.trainer.epoch = 3;
  c.trainer.step_in_epoch = 17;
  c.trainer.global_step = 1234;
  c.trainer.seed = 18446744073709551615ull;
  c.trainer.lr = 0.1;  // not exact in binary: hex floats must keep every bit
  c.trainer.epoch_loss_sum = 12.345678901234567;
  c.trainer.epoch_seconds = 1.0 / 7.0;
  c.trainer.total_seconds = 99.5;
  c.trainer.total_images = 40000;
  c.trainer.val_accuracy = {0.5, 0.7123456789, 1.0 / 3.0};
  c.trainer.config = {{"batch-size", "64"}, {"model", "wrn.onnx"}, {"freeze", ""}};
  return c;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

}  // namespace

TEST_CASE("checkpoint: write and read back bit for bit") {
  TempDir dir;
  const Checkpoint c = sample_checkpoint();
  const std::string path = checkpoint_path(dir.path.string(), c.trainer.global_step);
  CHECK(fs::path(path).filename() == "checkpoint-0000001234.ckpt");
  write_checkpoint(c, path);
  const Checkpoint r = read_checkpoint(path);
  REQUIRE(r.state.size() == c.state.size());
  for (const auto& [name, t] : c.state) {
    INFO(name);
    REQUIRE(r.state.count(name));
    CHECK(same_bits(r.state.at(name), t));
  }
  CHECK(r.trainer.epoch == 3);
  CHECK(r.trainer.step_in_epoch == 17);
  CHECK(r.trainer.global_step == 1234);
  CHECK(r.trainer.seed == c.trainer.seed);
  CHECK(r.trainer.lr == c.trainer.lr);  // exact equality on purpose
  CHECK(r.trainer.epoch_loss_sum == c.trainer.epoch_loss_sum);
  CHECK(r.trainer.epoch_seconds == c.trainer.epoch_seconds);
  CHECK(r.trainer.total_seconds == c.trainer.total_seconds);
  CHECK(r.trainer.total_images == 40000);
  CHECK(r.trainer.val_accuracy == c.trainer.val_accuracy);
  CHECK(r.trainer.config == c.trainer.config);
  // No temporary file is left next to it.
  int files = 0;
  for (const auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  CHECK(files == 1);
}

TEST_CASE("checkpoint: every truncation and every corrupted byte is refused, naming the file") {
  const Checkpoint c = sample_checkpoint();
  const std::string bytes = checkpoint_bytes(c);
  REQUIRE(bytes.size() > 40);
  // Every prefix (including empty) is refused.
  for (size_t n = 0; n < bytes.size(); ++n) {
    ErrorKind kind = ErrorKind::Internal;
    std::string e = error_of([&] { parse_checkpoint(bytes.substr(0, n), "x.ckpt"); }, &kind);
    INFO("prefix of " << n << " bytes: " << e);
    REQUIRE(e.rfind("x.ckpt: ", 0) == 0);
    CHECK(kind == ErrorKind::BadInput);
  }
  // Every single flipped byte after the magic is refused (the version byte is
  // Unsupported; the header and payload are BadInput).
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string bad = bytes;
    bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    std::string e = error_of([&] { parse_checkpoint(bad, "x.ckpt"); });
    INFO("byte " << i << ": " << e);
    REQUIRE(e.rfind("x.ckpt: ", 0) == 0);
  }
  // Trailing garbage is refused too.
  CHECK(error_of([&] { parse_checkpoint(bytes + "x", "x.ckpt"); }).find("corrupted") != std::string::npos);
  CHECK(error_of([&] { parse_checkpoint(bytes.substr(0, bytes.size() - 1), "x.ckpt"); }).find("truncated") !=
        std::string::npos);
  CHECK(error_of([] { read_checkpoint("/nonexistent/c.ckpt"); }).find("/nonexistent/c.ckpt") == 0);
}

TEST_CASE("checkpoint: a valid envelope around a payload that is not a checkpoint is refused") {
  // The CRC matches, so the payload check itself must refuse it.
  auto wrap = [](const std::string& payload) {
    std::string env = std::string("trainrt-checkpoint\n") + std::string("\x01\0\0\0", 4);
    for (int i = 0; i < 8; ++i) env.push_back(static_cast<char>((payload.size() >> (8 * i)) & 0xff));
    uint32_t crc = static_cast<uint32_t>(
        ::crc32(0L, reinterpret_cast<const Bytef*>(payload.data()), static_cast<uInt>(payload.size())));
    for (int i = 0; i < 4; ++i) env.push_back(static_cast<char>((crc >> (8 * i)) & 0xff));
    return env + payload;
  };
  const std::string good = checkpoint_bytes(sample_checkpoint());
  CHECK(parse_checkpoint(wrap(good.substr(35)), "ok.ckpt").trainer.global_step == 1234);  // the wrapper is right
  Graph g;
  g.name = "not a checkpoint";
  CHECK(error_of([&] { parse_checkpoint(wrap(export_onnx_bytes(g)), "y.ckpt"); }) ==
        "y.ckpt: checkpoint payload is not a trainrt checkpoint (protobuf parse failed)");
  CHECK(error_of([&] { parse_checkpoint(wrap("\xff\xff\xff"), "y.ckpt"); }).rfind("y.ckpt: ", 0) == 0);
}

TEST_CASE("checkpoint folder: newest by step, pruning keeps the last K, temporaries ignored") {
  TempDir dir;
  Checkpoint c = sample_checkpoint();
  for (int64_t step : {5, 100, 20, 7}) write_checkpoint(c, checkpoint_path(dir.path.string(), step));
  std::ofstream(dir.file(".checkpoint-0000000999.ckpt.tmp.abcdef")) << "partial";
  std::ofstream(dir.file("notes.txt")) << "x";
  auto all = list_checkpoints(dir.path.string());
  REQUIRE(all.size() == 4);
  CHECK(fs::path(all.front()).filename() == "checkpoint-0000000005.ckpt");
  CHECK(fs::path(latest_checkpoint(dir.path.string())).filename() == "checkpoint-0000000100.ckpt");
  prune_checkpoints(dir.path.string(), 2);
  all = list_checkpoints(dir.path.string());
  REQUIRE(all.size() == 2);
  CHECK(fs::path(all[0]).filename() == "checkpoint-0000000020.ckpt");
  CHECK(fs::path(all[1]).filename() == "checkpoint-0000000100.ckpt");
  CHECK(fs::exists(dir.file("notes.txt")));
  CHECK(latest_checkpoint((dir.path / "missing").string()).empty());
}

TEST_CASE("checkpoint: resume flags are compared one by one") {
  std::map<std::string, std::string> saved{{"batch-size", "64"}, {"optimizer", "sgd"}};
  CHECK(config_mismatch(saved, saved).empty());
  CHECK(config_mismatch(saved, {{"batch-size", "32"}, {"optimizer", "sgd"}}) ==
        "--batch-size: the checkpoint was written with '64', this run has '32'");
  CHECK(config_mismatch(saved, {{"seed", "1"}}).find("--seed") == 0);
}
