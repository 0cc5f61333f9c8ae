#include "autodiff/gradient.h"

namespace trainrt {

void register_shape_gradients(GradRegistry& r) { (void)r; }

}  // namespace trainrt
