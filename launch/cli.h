// Command-line parsing for the `trainrt` subcommands.
//
//   CommandSpec spec{"inspect", "trainrt inspect MODEL.onnx [options]", "Print ...",
//                    {{"json", "", "print JSON", Flag::Switch}}, 1, 1};
//   Args a = parse_args(spec, argv);     // BadInput on unknown flags, missing values
//   if (a.help) { print_help(spec); return 0; }
//   bool json = a.on("json");
//
// Why hand-written: a few dozen lines cover --flag value, --flag=value, switches,
// repeatable flags and --help with defaults; no Debian CLI library is worth the
// dependency for that.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace trainrt {

struct Flag {
  enum Kind { Value, Switch, Repeat };
  std::string name;      // without the leading --
  std::string fallback;  // default value shown in --help ("" = none)
  std::string help;
  Kind kind = Value;
};

struct CommandSpec {
  std::string name;
  std::string usage;
  std::string summary;
  std::vector<Flag> flags;
  size_t min_positional = 0, max_positional = 0;
};

struct Args {
  bool help = false;
  std::vector<std::string> positional;
  std::map<std::string, std::vector<std::string>> values;

  bool on(const std::string& name) const { return values.count(name) != 0; }
  std::string str(const std::string& name) const;  // value or the flag's default
  const std::vector<std::string>& all(const std::string& name) const;
  int64_t integer(const std::string& name) const;  // BadInput naming the flag if not an integer
  double number(const std::string& name) const;

  const CommandSpec* spec = nullptr;
};

Args parse_args(const CommandSpec& spec, const std::vector<std::string>& argv);
void print_help(const CommandSpec& spec);

}  // namespace trainrt
