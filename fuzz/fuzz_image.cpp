// Fuzz target: bytes -> launch/image.h's JPEG decoder, then both transforms.
//
//   build-fz/fuzz/fuzz_image_jpeg -max_total_time=60 corpus/image_jpeg
//
// A decoded image goes through the validation and training transforms (size 8)
// so that odd sizes (1 x N, very wide) reach the resampling too.
#include <string>

#include "fuzz/fuzz_util.h"
#include "launch/image.h"

using namespace trainrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::expect_clean_error([&] {
    // At most 4 M pixels (12 MB decoded), well under -malloc_limit_mb; the limit itself is tested.
    const Image im = decode_jpeg(data, size, "fuzz.jpeg", int64_t{1} << 22);
    (void)eval_transform(im, 8);
    double u = 0.37;
    (void)train_transform(im, 8, [&] { return u = u * 3.9 * (1 - u); });
  });
}
