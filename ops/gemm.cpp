#include "ops/register_all.h"

namespace trainrt {

void register_gemm(Registry& r) { (void)r; }

}  // namespace trainrt
