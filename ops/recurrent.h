// Registration of the recurrent ops LSTM, GRU and RNN (ops/recurrent.cpp), called by
// register_all() (ops/core/register_all.cpp). They have schemas and shape rules only:
// import rewrites every such node into existing ops before anything runs or is
// differentiated (graph/expand_recurrent.cpp, graph/expand_recurrent.h).
#pragma once

#include "ops/core/register_all.h"

namespace trainrt {

void register_recurrent(Registry& r);  // schemas and shape rules; no kernels

}  // namespace trainrt
