#include "autodiff/gradient.h"

namespace trainrt {

void register_norm_gradients(GradRegistry& r) { (void)r; }

}  // namespace trainrt
