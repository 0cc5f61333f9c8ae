// JPEG and PNG decoding and the torchvision transforms of image-folder datasets.
//
//   Image im = decode_image(read_file_bytes(path, max), path);   // RGB 8-bit, H x W x 3
//   CropBox b = random_resized_crop(im.height, im.width, uniform01);  // training
//   resize_region(im, b, 224, 224, out);                         // bilinear, out: 224x224x3
//   image_to_chw(out, 224, 224, flip, mean, std, dst);           // float32 [3,224,224]
//
// Decoders: libjpeg-turbo (grayscale, YCbCr, CMYK and YCCK become RGB) and libpng
// (gray, palette, 16-bit, alpha and tRNS all become RGB 8-bit: alpha is dropped, as
// PIL's convert("RGB") does; 16-bit keeps its high byte, where PIL clips 16-bit gray). A corrupt or truncated file, a
// file that is neither, or one larger than kMaxImagePixels is a BadInput error naming `where`; libjpeg warnings (e.g.
// "premature end of data", which it would fill with gray) are errors too. Both libraries report errors through
// setjmp/longjmp here, never through their default handlers (libjpeg's calls exit()).
//
// Transforms, as torchvision 0.14 applies them to PIL images:
//   random_resized_crop: RandomResizedCrop.get_params(scale=(0.08,1), ratio=(3/4,4/3)):
//     10 attempts at area*U(0.08,1) with aspect exp(U(log 3/4, log 4/3)), w/h rounded
//     half to even, kept when they fit (offsets uniform); else the centre crop of the
//     largest box with an aspect inside the ratio range.
//   resize_shorter + center_crop: Resize(s) scales the shorter side to s and the
//     longer to int(s*long/short); CenterCrop(size) starts at round((H-size)/2).
//   resize_region: PIL's bilinear resampling of a box of the image: a triangle
//     filter widened by the scale when shrinking (antialiasing), in PIL's fixed point
//     (22 fraction bits), horizontal pass then vertical, each rounded to 8 bits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace trainrt {

constexpr int64_t kMaxImagePixels = int64_t{1} << 27;  // 134 M pixels (e.g. 16384 x 8192)

struct Image {
  int64_t height = 0, width = 0;
  std::vector<uint8_t> rgb;  // [height][width][3]
};

// Decodes by content (JPEG: FF D8 FF, PNG: 89 'PNG'), whatever the file's extension.
// An image of more than max_pixels pixels is refused before its pixels are decoded.
Image decode_image(const std::string& bytes, const std::string& where, int64_t max_pixels = kMaxImagePixels);
Image decode_jpeg(const uint8_t* data, size_t size, const std::string& where, int64_t max_pixels = kMaxImagePixels);
Image decode_png(const uint8_t* data, size_t size, const std::string& where, int64_t max_pixels = kMaxImagePixels);

struct CropBox {
  int64_t top = 0, left = 0, height = 0, width = 0;
  bool operator==(const CropBox&) const = default;
};

// uniform01() returns doubles in [0, 1).
CropBox random_resized_crop(int64_t height, int64_t width, const std::function<double()>& uniform01);
// Output size of Resize(shorter) for an image of height x width: {height, width}.
std::pair<int64_t, int64_t> resize_shorter(int64_t height, int64_t width, int64_t shorter);
CropBox center_crop(int64_t height, int64_t width, int64_t size);

// Box b of `in` resampled to out_h x out_w (RGB, 8-bit) into out.
void resize_region(const Image& in, const CropBox& b, int64_t out_h, int64_t out_w, Image& out);

// RGB H x W x 3 -> float32 [3][H][W] of (v/255 - mean[c]) / std[c], mirrored left-right when flip.
void image_to_chw(const Image& im, bool flip, const float* mean, const float* std, float* out);

// The validation transform (Resize(round(size/0.875)) + CenterCrop(size)) of a decoded image.
Image eval_transform(const Image& im, int64_t size);
// The training transform's geometry (RandomResizedCrop(size)); the flip is image_to_chw's.
Image train_transform(const Image& im, int64_t size, const std::function<double()>& uniform01);

}  // namespace trainrt
