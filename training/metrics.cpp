#include "training/metrics.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>

#include "graph/error.h"
#include "graph/onnx_io.h"

namespace trainrt {

MetricsWriter::MetricsWriter(const std::string& path) {
  if (path.empty()) return;
  f_ = std::fopen(path.c_str(), "w");
  if (!f_) throw_bad_input("--metrics " + path, std::string("cannot open for writing: ") + std::strerror(errno));
}

namespace {
// Whether a line MetricsWriter wrote comes after the checkpoint a run resumes from.
// A line that is not one of its objects is kept.
bool after_resume_point(const std::string& line, int64_t resume_step, int64_t resume_epochs) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  const std::string kind = j.value("kind", "");
  if (kind == "step") return j.value("step", int64_t{-1}) > resume_step;
  if (kind == "epoch") return j.value("epoch", int64_t{-1}) > resume_epochs;
  return false;
}

void write_line(FILE* f, const nlohmann::ordered_json& j) {
  std::fputs((j.dump() + "\n").c_str(), f);
  std::fflush(f);
}
}  // namespace

MetricsWriter::MetricsWriter(const std::string& path, int64_t resume_step, int64_t resume_epochs) {
  if (path.empty()) return;
  std::error_code ec;
  if (std::filesystem::exists(path, ec)) {
    std::stringstream in(read_file_bytes(path, uint64_t{1} << 30));
    std::string kept;
    for (std::string line; std::getline(in, line);)
      if (!after_resume_point(line, resume_step, resume_epochs)) kept += line + "\n";
    write_file_atomic(path, kept);
  }
  f_ = std::fopen(path.c_str(), "a");
  if (!f_) throw_bad_input("--metrics " + path, std::string("cannot open for writing: ") + std::strerror(errno));
}

MetricsWriter::~MetricsWriter() {
  if (f_) std::fclose(f_);
}

void MetricsWriter::step(int64_t step, int64_t epoch, double loss, double lr) {
  if (!f_) return;
  write_line(f_, {{"kind", "step"}, {"step", step}, {"epoch", epoch}, {"loss", loss}, {"lr", lr}});
}

void MetricsWriter::epoch(int64_t epoch, double epoch_time, double train_loss, double val_loss, double val_accuracy,
                          double images_per_sec, double cumulative_time, double lr) {
  if (!f_) return;
  write_line(f_, {{"kind", "epoch"},
                  {"epoch", epoch},
                  {"epoch_time", epoch_time},
                  {"train_loss", train_loss},
                  {"val_loss", val_loss},
                  {"val_accuracy", val_accuracy},
                  {"images_per_sec", images_per_sec},
                  {"cumulative_time", cumulative_time},
                  {"lr", lr}});
}

}  // namespace trainrt
