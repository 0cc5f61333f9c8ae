#include "ops/register_all.h"

namespace trainrt {

void register_norm(Registry& r) { (void)r; }

}  // namespace trainrt
