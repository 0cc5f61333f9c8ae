#include "autodiff/gradient.h"

namespace trainrt {

void register_conv_gradients(GradRegistry& r) { (void)r; }

}  // namespace trainrt
