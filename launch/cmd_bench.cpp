// `trainrt bench`: being written; until then it says so and exits 2.
#include "graph/error.h"
#include "launch/commands.h"

namespace trainrt {

int cmd_bench(const Argv&) { throw_unsupported("trainrt bench", "is not implemented in this build yet"); }

}  // namespace trainrt
