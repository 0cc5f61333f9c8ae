// Fuzz target: bytes -> datasets/image.h's JPEG or PNG decoder, then both transforms.
// One source, two executables: cmake/fuzz.cmake compiles it with FUZZ_IMAGE_PNG=0
// (fuzz_image_jpeg) and FUZZ_IMAGE_PNG=1 (fuzz_image_png).
//
//   build-fz/fuzz/fuzz_image_jpeg -max_total_time=60 corpus/image_jpeg
//   build-fz/fuzz/fuzz_image_png -max_total_time=60 corpus/image_png
//
// A decoded image goes through the validation and training transforms (size 8)
// so that odd sizes (1 x N, very wide) reach the resampling too.
#include <string>

#include "datasets/image.h"
#include "fuzz/fuzz_util.h"

#ifndef FUZZ_IMAGE_PNG
#error "FUZZ_IMAGE_PNG must be 0 (the JPEG decoder) or 1 (the PNG decoder): see cmake/fuzz.cmake"
#endif

using namespace trainrt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::expect_clean_error([&] {
    // At most 4 M pixels (12 MB decoded), well under -malloc_limit_mb; the limit itself is tested.
    const int64_t max_pixels = int64_t{1} << 22;
    const Image im = FUZZ_IMAGE_PNG ? decode_png(data, size, "fuzz.png", max_pixels)
                                    : decode_jpeg(data, size, "fuzz.jpeg", max_pixels);
    (void)eval_transform(im, 8);
    double u = 0.37;
    (void)train_transform(im, 8, [&] { return u = u * 3.9 * (1 - u); });
  });
}
