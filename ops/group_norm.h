// Registration of the InstanceNormalization / GroupNormalization family (ops/group_norm.cpp,
// ops/group_norm_cpu.cpp), called by register_all() (ops/core/register_all.cpp).
#pragma once

#include "ops/core/register_all.h"

namespace trainrt {

void register_group_norm(Registry& r);      // schemas and reference kernels
void register_group_norm_cpu(Registry& r);  // the cpu kernels

}  // namespace trainrt
