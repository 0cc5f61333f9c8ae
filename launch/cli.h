// Command-line parsing for the `trainrt` subcommands.
//
//   CommandSpec spec{"inspect", "trainrt inspect MODEL.onnx [options]", "Print ...",
//                    {{"json", "", "print JSON", Flag::Switch}}, 1, 1};
//   Args a = parse_args(spec, argv);     // BadInput on unknown flags, missing values
//   if (a.help) { print_help(spec); return 0; }
//   bool json = a.on("json");
//   int64_t steps = a.at_least("steps", 1);             // the validators: BadInput "--steps: must be >= 1, got 0"
//   std::string fuse = a.one_of("fuse", {"on", "off"});
//
// Why hand-written: a few dozen lines cover --flag value, --flag=value, switches,
// repeatable flags and --help with defaults; no Debian CLI library is worth the
// dependency for that.
#pragma once

#include <cstdint>
#include <initializer_list>
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

  // The validators every command uses: each returns the flag's value (or default) or
  // throws BadInput "--NAME: <what is wrong>, got <value>".
  int64_t positive(const std::string& name) const;                  // "must be > 0"
  int64_t at_least(const std::string& name, int64_t lowest) const;  // "must be >= LOWEST"
  double positive_number(const std::string& name) const;            // finite and > 0
  std::string one_of(const std::string& name, std::initializer_list<const char*> allowed) const;
  bool on_off(const std::string& name) const { return one_of(name, {"on", "off"}) == "on"; }
  // A file to write: its folder must exist ("--NAME PATH: its folder does not exist").
  std::string output_path(const std::string& name) const;

  const CommandSpec* spec = nullptr;
};

Args parse_args(const CommandSpec& spec, const std::vector<std::string>& argv);
void print_help(const CommandSpec& spec);

}  // namespace trainrt
