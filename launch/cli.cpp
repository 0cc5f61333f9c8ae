#include "launch/cli.h"

#include <cmath>
#include <cstdio>
#include <filesystem>

#include "graph/error.h"

namespace trainrt {

namespace {
const Flag* find_flag(const CommandSpec& spec, const std::string& name) {
  for (const Flag& f : spec.flags)
    if (f.name == name) return &f;
  return nullptr;
}
}  // namespace

Args parse_args(const CommandSpec& spec, const std::vector<std::string>& argv) {
  Args a;
  a.spec = &spec;
  const std::string cmd = "trainrt " + spec.name;
  for (size_t i = 0; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      a.help = true;
      return a;
    }
    if (arg.size() > 2 && arg.rfind("--", 0) == 0) {
      std::string name = arg.substr(2), value;
      bool inline_value = false;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
        inline_value = true;
      }
      const Flag* f = find_flag(spec, name);
      if (!f) throw_bad_input(cmd, "unknown flag --" + name + " (see trainrt " + spec.name + " --help)");
      if (f->kind == Flag::Switch) {
        if (inline_value) throw_bad_input(cmd, "--" + name + " takes no value");
        a.values[name].push_back("1");
        continue;
      }
      if (!inline_value) {
        if (i + 1 >= argv.size()) throw_bad_input(cmd, "--" + name + " needs a value");
        value = argv[++i];
      }
      if (f->kind == Flag::Value && a.values.count(name))
        throw_bad_input(cmd, "--" + name + " is given more than once");
      a.values[name].push_back(value);
      continue;
    }
    if (arg.rfind("-", 0) == 0 && arg.size() > 1 && arg != "-o")
      throw_bad_input(cmd, "unknown option " + arg + " (see trainrt " + spec.name + " --help)");
    if (arg == "-o" && find_flag(spec, "output")) {
      if (i + 1 >= argv.size()) throw_bad_input(cmd, "-o needs a value");
      if (a.values.count("output")) throw_bad_input(cmd, "--output is given more than once");
      a.values["output"].push_back(argv[++i]);
      continue;
    }
    a.positional.push_back(arg);
  }
  if (a.positional.size() < spec.min_positional || a.positional.size() > spec.max_positional)
    throw_bad_input(cmd, "usage: " + spec.usage);
  return a;
}

std::string Args::str(const std::string& name) const {
  auto it = values.find(name);
  if (it != values.end()) return it->second.back();
  const Flag* f = spec ? find_flag(*spec, name) : nullptr;
  return f ? f->fallback : "";
}

const std::vector<std::string>& Args::all(const std::string& name) const {
  static const std::vector<std::string> none;
  auto it = values.find(name);
  return it == values.end() ? none : it->second;
}

int64_t Args::integer(const std::string& name) const {
  std::string v = str(name);
  try {
    size_t used = 0;
    int64_t r = std::stoll(v, &used);
    if (used == v.size()) return r;
  } catch (const std::exception&) {
  }
  throw_bad_input("--" + name, "expected an integer, got '" + v + "'");
}

double Args::number(const std::string& name) const {
  std::string v = str(name);
  try {
    size_t used = 0;
    double r = std::stod(v, &used);
    if (used == v.size()) return r;
  } catch (const std::exception&) {
  }
  throw_bad_input("--" + name, "expected a number, got '" + v + "'");
}

int64_t Args::positive(const std::string& name) const {
  const int64_t v = integer(name);
  if (v <= 0) throw_bad_input("--" + name, "must be > 0, got " + std::to_string(v));
  return v;
}

int64_t Args::at_least(const std::string& name, int64_t lowest) const {
  const int64_t v = integer(name);
  if (v < lowest) throw_bad_input("--" + name, "must be >= " + std::to_string(lowest) + ", got " + std::to_string(v));
  return v;
}

double Args::positive_number(const std::string& name) const {
  const double v = number(name);
  if (!(v > 0) || !std::isfinite(v))
    throw_bad_input("--" + name, "must be > 0 (a finite number), got '" + str(name) + "'");
  return v;
}

std::string Args::one_of(const std::string& name, std::initializer_list<const char*> allowed) const {
  const std::string v = str(name);
  std::string list;
  for (const char* c : allowed) {
    if (v == c) return v;
    list += (list.empty() ? "" : ", ") + std::string(c);
  }
  throw_bad_input("--" + name, "expected one of " + list + ", got '" + v + "'");
}

std::string Args::output_path(const std::string& name) const {
  const std::string v = str(name);
  if (!v.empty() && !std::filesystem::is_directory(std::filesystem::absolute(v).parent_path()))
    throw_bad_input("--" + name + " " + v, "its folder does not exist");
  return v;
}

void print_help(const CommandSpec& spec) {
  std::printf("usage: %s\n\n%s\n\noptions:\n", spec.usage.c_str(), spec.summary.c_str());
  for (const Flag& f : spec.flags) {
    std::string left = "  --" + f.name + (f.kind == Flag::Switch ? "" : " VALUE");
    const std::string fallback = f.fallback.empty() && f.kind == Flag::Value ? "none" : f.fallback;
    std::printf("%-30s %s%s%s\n", left.c_str(), f.help.c_str(),
                fallback.empty() ? "" : " (default: ", fallback.empty() ? "" : (fallback + ")").c_str());
  }
  std::printf("  %-28s %s\n", "--help", "show this help");
}

}  // namespace trainrt
