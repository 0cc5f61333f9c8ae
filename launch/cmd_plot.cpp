// `trainrt plot`: being written; until then it says so and exits 2.
#include "graph/error.h"
#include "launch/commands.h"

namespace trainrt {

int cmd_plot(const Argv&) { throw_unsupported("trainrt plot", "is not implemented in this build yet"); }

}  // namespace trainrt
