// The flag parser of the trainrt subcommands (launch/cli.h): --flag value,
// --flag=value, switches, repeatable flags, -o, defaults, and the exact one-line
// BadInput text of each mistake (the CLI prints it as is).
#include <doctest/doctest.h>

#include "graph/error.h"
#include "launch/cli.h"

using namespace trainrt;

namespace {

const CommandSpec kSpec{"demo",
                        "trainrt demo MODEL [options]",
                        "A command for the parser's tests.",
                        {{"batch-size", "128", "images per step"},
                         {"base-lr", "0.1", "learning rate"},
                         {"output", "", "where to write"},
                         {"json", "", "print JSON", Flag::Switch},
                         {"input", "", "NAME=FILE, repeatable", Flag::Repeat}},
                        1,
                        1};

// The message of the BadInput error `f` throws; fails the test if it throws none or another kind.
template <class F>
std::string bad_input(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(e.kind() == ErrorKind::BadInput);
    return e.what();
  }
  FAIL_CHECK("no error");
  return "";
}

std::string parse_error(const std::vector<std::string>& argv) {
  return bad_input([&] { parse_args(kSpec, argv); });
}

}  // namespace

TEST_CASE("cli: values, inline values, switches, repeats, -o and positionals") {
  const Args a = parse_args(kSpec, {"--batch-size", "64", "m.onnx", "--json", "--input", "x=a.pb", "--input=y=b.pb",
                                    "--base-lr=1e-3", "-o", "out.onnx"});
  CHECK_FALSE(a.help);
  CHECK(a.positional == std::vector<std::string>{"m.onnx"});
  CHECK(a.str("batch-size") == "64");
  CHECK(a.integer("batch-size") == 64);
  CHECK(a.number("base-lr") == 1e-3);
  CHECK(a.on("json"));
  CHECK(a.all("input") == std::vector<std::string>{"x=a.pb", "y=b.pb"});  // in order, '=' kept after the first
  CHECK(a.str("output") == "out.onnx");
  CHECK(a.on("output"));
}

TEST_CASE("cli: flags not given read their defaults and are not 'on'") {
  const Args a = parse_args(kSpec, {"m.onnx"});
  CHECK_FALSE(a.on("batch-size"));
  CHECK(a.str("batch-size") == "128");
  CHECK(a.integer("batch-size") == 128);
  CHECK(a.number("base-lr") == 0.1);
  CHECK_FALSE(a.on("json"));
  CHECK(a.all("input").empty());
  CHECK(a.str("output").empty());
  CHECK(a.str("not-a-flag").empty());
  // A value may start with '-' when it follows its flag, and may be empty with '='.
  const Args b = parse_args(kSpec, {"m.onnx", "--base-lr", "-0.5", "--output="});
  CHECK(b.number("base-lr") == -0.5);
  CHECK(b.on("output"));
  CHECK(b.str("output").empty());
}

TEST_CASE("cli: --help and -h stop parsing, even with too few positionals or bad flags after them") {
  CHECK(parse_args(kSpec, {"--help"}).help);
  CHECK(parse_args(kSpec, {"-h"}).help);
  CHECK(parse_args(kSpec, {"m.onnx", "--help", "--nope"}).help);
}

TEST_CASE("cli: each mistake is one BadInput line naming the command and the flag") {
  CHECK(parse_error({"m.onnx", "--bogus"}) == "trainrt demo: unknown flag --bogus (see trainrt demo --help)");
  CHECK(parse_error({"m.onnx", "--bogus=3"}) == "trainrt demo: unknown flag --bogus (see trainrt demo --help)");
  CHECK(parse_error({"m.onnx", "-x"}) == "trainrt demo: unknown option -x (see trainrt demo --help)");
  CHECK(parse_error({"m.onnx", "--batch-size"}) == "trainrt demo: --batch-size needs a value");
  CHECK(parse_error({"m.onnx", "--input"}) == "trainrt demo: --input needs a value");
  CHECK(parse_error({"m.onnx", "-o"}) == "trainrt demo: -o needs a value");
  CHECK(parse_error({"m.onnx", "--json=1"}) == "trainrt demo: --json takes no value");
  CHECK(parse_error({"m.onnx", "--batch-size", "1", "--batch-size=2"}) ==
        "trainrt demo: --batch-size is given more than once");
  CHECK(parse_error({"m.onnx", "--output", "a", "-o", "b"}) == "trainrt demo: --output is given more than once");
  CHECK(parse_error({}) == "trainrt demo: usage: trainrt demo MODEL [options]");
  CHECK(parse_error({"a.onnx", "b.onnx"}) == "trainrt demo: usage: trainrt demo MODEL [options]");

  // -o is only a short form where the command has --output.
  const CommandSpec no_output{"bare", "trainrt bare", "", {}, 0, 0};
  CHECK(bad_input([&] { parse_args(no_output, {"-o", "x"}); }) == "trainrt bare: usage: trainrt bare");
}

TEST_CASE("cli: numbers are parsed whole; bad ones name the flag and echo the text") {
  auto integer = [](const std::string& v) { return parse_args(kSpec, {"m", "--batch-size", v}).integer("batch-size"); };
  auto number = [](const std::string& v) { return parse_args(kSpec, {"m", "--base-lr", v}).number("base-lr"); };
  CHECK(integer("0") == 0);
  CHECK(integer("-3") == -3);
  CHECK(integer("9007199254740993") == 9007199254740993);
  CHECK(number("2.5e-4") == 2.5e-4);
  CHECK(number("7") == 7.0);
  for (const char* v : {"12x", "1.5", "", "abc", " ", "99999999999999999999"})
    CHECK(bad_input([&] { integer(v); }) == std::string("--batch-size: expected an integer, got '") + v + "'");
  for (const char* v : {"0.1.2", "", "lr", "1e-3x", "1e999"})
    CHECK(bad_input([&] { number(v); }) == std::string("--base-lr: expected a number, got '") + v + "'");
}
