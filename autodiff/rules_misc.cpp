#include "autodiff/gradient.h"

namespace trainrt {

void register_misc_gradients(GradRegistry& r) { (void)r; }

}  // namespace trainrt
