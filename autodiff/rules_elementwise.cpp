#include "autodiff/gradient.h"

namespace trainrt {

void register_elementwise_gradients(GradRegistry& r) { (void)r; }

}  // namespace trainrt
