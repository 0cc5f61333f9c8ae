// Graph passes that keep the graph valid and typed.
//
//   eliminate_dead_nodes(g, {"loss", "w.updated"});   // keeps graph outputs too
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"

namespace trainrt {

// Removes nodes none of whose outputs reach a graph output or a value in `keep`,
// then drops initializers and value types nothing uses. Returns nodes removed.
size_t eliminate_dead_nodes(Graph& g, const std::vector<std::string>& keep = {});

}  // namespace trainrt
