// `trainrt plot metrics.jsonl -o curves.png|svg`: loss and accuracy curves of a run.
//
//   trainrt train m.onnx --metrics run.jsonl ...
//   trainrt plot run.jsonl -o curves.svg
//
// Reads the JSON lines `train --metrics` writes ({"kind":"epoch",...} per epoch,
// {"kind":"step",...} per --metrics-every steps) and draws with gnuplot (Debian's
// gnuplot-nox), run as a subprocess on a script and data files in a temporary
// folder: per epoch the train and validation loss, the validation accuracy, and
// the step loss when step lines are present. The image is drawn to a temporary
// name next to the output and renamed, so a failed plot leaves no partial file.
// A malformed line is a one-line error naming the file and the line number.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/onnx_io.h"
#include "launch/cli.h"
#include "launch/commands.h"

extern char** environ;

namespace trainrt {

namespace {

namespace fs = std::filesystem;

const CommandSpec kSpec{"plot",
                        "trainrt plot METRICS.jsonl -o CURVES.png|svg",
                        "Draw the loss and accuracy curves of a `trainrt train --metrics` file with gnuplot.",
                        {{"output", "", "the image to write: .png or .svg (also -o)"},
                         {"title", "", "title above the plots (default: the metrics file's name)"},
                         {"size", "900,700", "image size in pixels, W,H"}},
                        1,
                        1};

// One line of the file as a JSON object; a line that is not one is BadInput naming
// `where` (file:line) and the column: "expected ':' at column 52".
nlohmann::json parse_line(const std::string& line, const std::string& where) {
  const size_t first = line.find_first_not_of(" \t\r");
  if (line[first] != '{') throw_bad_input(where, "expected '{' at column " + std::to_string(first + 1));
  try {
    return nlohmann::json::parse(line);
  } catch (const nlohmann::json::parse_error& e) {
    // nlohmann's message ends "...; expected ':'" or "...; expected end of input".
    const std::string what = e.what(), column = " at column " + std::to_string(e.byte);
    const size_t at = what.rfind("; expected ");
    if (at == std::string::npos) throw_bad_input(where, "not a JSON object" + column);
    const std::string expected = what.substr(at + 2);
    if (expected == "expected end of input") throw_bad_input(where, "unexpected text after the object" + column);
    throw_bad_input(where, expected + column);
  }
}

double field(const nlohmann::json& r, const char* key, const std::string& where) {
  auto it = r.find(key);
  if (it == r.end()) throw_bad_input(where, std::string("missing field \"") + key + "\"");
  if (!it->is_number() || !std::isfinite(it->get<double>()))
    throw_bad_input(where, std::string("field \"") + key + "\" is not a finite number");
  return it->get<double>();
}

// gnuplot string literal in single quotes ('' escapes a quote).
std::string quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("''") : std::string(1, c);
  return out + "'";
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  if (!f) throw_internal(path, "cannot write a temporary file");
}

struct TempDir {
  std::string path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "trainrt-plot.XXXXXX").string();
    if (!::mkdtemp(tmpl.data())) throw_internal("trainrt plot", "cannot create a temporary folder");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Runs gnuplot on `script`; its stderr goes to `log`. Returns its exit status (127: not found).
int run_gnuplot(const std::string& script, const std::string& log) {
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, STDERR_FILENO, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  const char* gnuplot = std::getenv("TRAINRT_GNUPLOT") ? std::getenv("TRAINRT_GNUPLOT") : "gnuplot";
  std::vector<char*> args{const_cast<char*>(gnuplot), const_cast<char*>(script.c_str()), nullptr};
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, gnuplot, &fa, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  if (rc != 0) return 127;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR) return 1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

}  // namespace

int cmd_plot(const Argv& argv) {
  Args a = parse_args(kSpec, argv);
  if (a.help) return print_help(kSpec), 0;
  const std::string in = a.positional[0], out = a.str("output");
  if (out.empty()) throw_bad_input("trainrt plot", "needs -o CURVES.png or CURVES.svg");
  const std::string ext = fs::path(out).extension().string();
  if (ext != ".png" && ext != ".svg") throw_bad_input("-o " + out, "the image must end in .png or .svg");
  int width = 0, height = 0;
  char tail = 0;
  if (std::sscanf(a.str("size").c_str(), "%d,%d%c", &width, &height, &tail) != 2 || width < 100 || height < 100 ||
      width > 10000 || height > 10000)
    throw_bad_input("--size", "expected W,H in pixels (100..10000), got '" + a.str("size") + "'");

  // Parse every line first: a bad file fails before anything is drawn.
  std::stringstream text(read_file_bytes(in, uint64_t{1} << 30));
  std::ostringstream epochs, steps;
  int64_t n_epochs = 0, n_steps = 0, lineno = 0;
  for (std::string line; std::getline(text, line);) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = in + ":" + std::to_string(lineno);
    const nlohmann::json r = parse_line(line, where);
    const std::string kind = r.contains("kind") && r["kind"].is_string() ? r["kind"].get<std::string>() : "";
    char buf[256];
    if (kind == "epoch") {
      std::snprintf(buf, sizeof buf, "%.17g %.17g %.17g %.17g\n", field(r, "epoch", where),
                    field(r, "train_loss", where), field(r, "val_loss", where), field(r, "val_accuracy", where));
      epochs << buf;
      ++n_epochs;
    } else if (kind == "step") {
      std::snprintf(buf, sizeof buf, "%.17g %.17g\n", field(r, "step", where), field(r, "loss", where));
      steps << buf;
      ++n_steps;
    } else {
      throw_bad_input(where, "expected \"kind\": \"epoch\" or \"step\", got '" + kind + "'");
    }
  }
  if (n_epochs == 0 && n_steps == 0) throw_bad_input(in, "has no epoch or step lines (is it a --metrics file?)");

  TempDir tmp;
  const std::string edat = tmp.path + "/epochs.dat", sdat = tmp.path + "/steps.dat", gp = tmp.path + "/plot.gp";
  write_text(edat, epochs.str());
  write_text(sdat, steps.str());
  const fs::path target(out);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  if (!fs::is_directory(dir)) throw_bad_input("-o " + out, "folder " + dir.string() + " does not exist");
  const std::string partial = (dir / ("." + target.filename().string() + ".tmp")).string();
  const std::string title = a.on("title") ? a.str("title") : fs::path(in).filename().string();
  const int panels = (n_epochs > 0 ? 2 : 0) + (n_steps > 0 ? 1 : 0);

  std::ostringstream s;
  s << (ext == ".svg" ? "set terminal svg dynamic" : "set terminal pngcairo") << " size " << width << "," << height
    << " font 'sans,10'\n"
    << "set output " << quoted(partial) << "\n"
    << "set grid\nset key top right\n"
    << "set multiplot layout " << panels << ",1 title " << quoted(title) << "\n";
  if (n_epochs > 0) {
    const char* points = n_epochs == 1 ? "linespoints" : "lines";
    s << "set xlabel 'epoch'\nset ylabel 'loss'\n"
      << "plot " << quoted(edat) << " using 1:2 with " << points << " lw 2 title 'train loss', " << quoted(edat)
      << " using 1:3 with " << points << " lw 2 title 'validation loss'\n"
      << "set ylabel 'accuracy'\nset key bottom right\n"
      << "plot " << quoted(edat) << " using 1:4 with linespoints lw 2 title 'validation accuracy'\n";
  }
  if (n_steps > 0)
    s << "set xlabel 'step'\nset ylabel 'loss'\nset key top right\n"
      << "plot " << quoted(sdat) << " using 1:2 with lines title 'step loss'\n";
  s << "unset multiplot\nset output\n";
  write_text(gp, s.str());

  const std::string log = tmp.path + "/gnuplot.log";
  const int rc = run_gnuplot(gp, log);
  std::error_code ec;
  if (rc != 0) {
    fs::remove(partial, ec);
    if (rc == 127)
      throw_bad_input("trainrt plot", "gnuplot was not found on PATH (Debian: apt-get install gnuplot-nox)");
    std::ifstream lf(log);
    std::string first, line;
    while (std::getline(lf, line))
      if (first.empty() && line.find_first_not_of(" \t") != std::string::npos) first = line;
    throw_internal("gnuplot", "exited " + std::to_string(rc) + (first.empty() ? "" : ": " + first));
  }
  if (!fs::exists(partial, ec) || fs::file_size(partial, ec) == 0)
    throw_internal("gnuplot", "wrote no image to " + partial);
  // fsync the image, then rename it into place.
  const int fd = ::open(partial.c_str(), O_RDONLY);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
  fs::rename(partial, out, ec);
  if (ec) {
    fs::remove(partial, ec);
    throw_bad_input(out, "cannot write: " + ec.message());
  }
  std::printf("Wrote %s (%lld epochs, %lld step points)\n", out.c_str(), static_cast<long long>(n_epochs),
              static_cast<long long>(n_steps));
  return 0;
}

}  // namespace trainrt
