// Errors that travel up to the CLI as one line.
//
//   throw_bad_input("model.onnx: " + describe_node(node, 3), "attribute 'strides' must be > 0, got 0");
//   -> "model.onnx: node 3 'conv1' (Conv): attribute 'strides' must be > 0, got 0"
//   (describe_node: graph/ir.h; a shape rule's InferContext::where() says the same)
//
// Why: every layer adds context (file, node index/name/op, field) to the message
// and the CLI prints `error: <message>` and exits 2 for bad input (the user can fix
// it), 1 for an internal fault (a bug in trainrt) and 3 when another rank of a
// multi-rank job died, hung or disagrees.
#pragma once

#include <stdexcept>
#include <string>

namespace trainrt {

enum class ErrorKind {
  BadInput,     // malformed or hostile file, bad flag, wrong shape: exit 2
  Unsupported,  // valid ONNX that trainrt does not implement yet: exit 2
  Internal,     // a trainrt bug or a library failure: exit 1
  Peer,         // another rank died, hung or disagrees (distribution/communicator.h): exit 3,
                // so a job script can tell it from bad input and requeue
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message) : std::runtime_error(message), kind_(kind) {}
  ErrorKind kind() const { return kind_; }
  int exit_code() const { return kind_ == ErrorKind::Internal ? 1 : kind_ == ErrorKind::Peer ? 3 : 2; }

 private:
  ErrorKind kind_;
};

[[noreturn]] inline void throw_bad_input(const std::string& where, const std::string& what) {
  throw Error(ErrorKind::BadInput, where.empty() ? what : where + ": " + what);
}
[[noreturn]] inline void throw_unsupported(const std::string& where, const std::string& what) {
  throw Error(ErrorKind::Unsupported, where.empty() ? what : where + ": " + what);
}
[[noreturn]] inline void throw_internal(const std::string& where, const std::string& what) {
  throw Error(ErrorKind::Internal, where.empty() ? what : where + ": " + what);
}

// Checks an internal invariant; a failure is a trainrt bug, reported with file:line.
#define TRAINRT_ASSERT(cond)                                                            \
  do {                                                                                  \
    if (!(cond))                                                                        \
      ::trainrt::throw_internal(std::string(__FILE__) + ":" + std::to_string(__LINE__), \
                                "internal check failed: " #cond);                       \
  } while (0)

}  // namespace trainrt
