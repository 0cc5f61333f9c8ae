#include "graph/error.h"
#include "launch/commands.h"

namespace trainrt {

int cmd_model(const Argv&) { throw_unsupported("trainrt model", "not built yet"); }

}  // namespace trainrt
