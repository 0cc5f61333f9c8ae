#include "autodiff/gradient.h"

namespace trainrt {

void register_pool_gradients(GradRegistry& r) { (void)r; }

}  // namespace trainrt
