#include "datasets/image.h"

// clang-format off
#include <cstdio>   // jpeglib.h needs FILE and size_t first
#include <jpeglib.h>
#include <jerror.h>  // message codes (JWRN_JPEG_EOF) and ERREXIT
#include <png.h>
// clang-format on

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstring>

#include "graph/error.h"

namespace trainrt {

namespace {

// ---------------------------------------------------------------- JPEG
// libjpeg's errors longjmp back to jpeg_decode_c (its default handler exits the
// process). No C++ object with a destructor lives in that frame after setjmp.
struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Data that ends early is an error (libjpeg would fill the rest with gray); the other
// corrupt-data warnings are recovered from silently, as PIL does.
void jpeg_message(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) jpeg_fail(cinfo);
}

enum DecodeStatus { kDecoded, kLibraryError, kTooLarge };

// In place, 4 bytes per pixel -> 3, as PIL converts CMYK: R = (255-C)(255-K)/255 rounded.
void cmyk_to_rgb(Image& im, bool inverted) {
  const int64_t n = im.height * im.width;
  uint8_t* p = im.rgb.data();
  auto muldiv255 = [](unsigned a, unsigned b) {
    const unsigned t = a * b + 128;
    return static_cast<uint8_t>((t + (t >> 8)) >> 8);
  };
  for (int64_t i = 0; i < n; ++i) {
    uint8_t v[4];
    for (int c = 0; c < 4; ++c) v[c] = inverted ? p[i * 4 + c] : static_cast<uint8_t>(255 - p[i * 4 + c]);
    for (int c = 0; c < 3; ++c) p[i * 3 + c] = muldiv255(v[c], v[3]);  // (255-C) * (255-K) / 255
  }
  im.rgb.resize(static_cast<size_t>(n * 3));
}

DecodeStatus jpeg_decode_c(const uint8_t* data, size_t size, int64_t max_pixels, Image* out, JpegError* err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_fail;
  err->mgr.emit_message = jpeg_message;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return kLibraryError;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // Grayscale and YCbCr convert to RGB in libjpeg; CMYK and YCCK come out as CMYK.
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  if (static_cast<int64_t>(cinfo.image_width) * cinfo.image_height > max_pixels) {
    jpeg_destroy_decompress(&cinfo);
    return kTooLarge;
  }
  jpeg_start_decompress(&cinfo);
  const int channels = cmyk ? 4 : 3;
  if (cinfo.output_components != channels) ERREXIT(&cinfo, JERR_BAD_J_COLORSPACE);
  out->height = cinfo.output_height;
  out->width = cinfo.output_width;
  out->rgb.resize(static_cast<size_t>(out->height * out->width * channels));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out->rgb.data() + static_cast<size_t>(cinfo.output_scanline) * out->width * channels;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  const bool inverted = cinfo.saw_Adobe_marker;  // Adobe writes CMYK inverted
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (cmyk) cmyk_to_rgb(*out, inverted);
  return kDecoded;
}

// ---------------------------------------------------------------- PNG
struct PngSource {
  const uint8_t* data;
  size_t size, at;
  char message[256];
};

[[noreturn]] void png_fail(png_structp png, png_const_charp msg) {
  auto* s = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(s->message, sizeof s->message, "%s", msg);
  png_longjmp(png, 1);
}

void png_warn(png_structp, png_const_charp) {}

void png_read_memory(png_structp png, png_bytep out, size_t n) {
  auto* s = static_cast<PngSource*>(png_get_io_ptr(png));
  if (s->size - s->at < n) png_error(png, "file is truncated");
  std::memcpy(out, s->data + s->at, n);
  s->at += n;
}

DecodeStatus png_decode_c(PngSource* src, int64_t max_pixels, Image* out) {
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, src, png_fail, png_warn);
  if (!png) return std::snprintf(src->message, sizeof src->message, "out of memory"), kLibraryError;
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    return std::snprintf(src->message, sizeof src->message, "out of memory"), kLibraryError;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return kLibraryError;
  }
  png_set_read_fn(png, src, png_read_memory);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  if (static_cast<int64_t>(w) * h > max_pixels) {
    png_destroy_read_struct(&png, &info, nullptr);
    return kTooLarge;
  }
  const int color = png_get_color_type(png, info);
  png_set_expand(png);  // palette -> RGB, gray < 8 bits -> 8, tRNS -> alpha
  png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (!(color & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
  const int passes = png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != static_cast<size_t>(w) * 3) png_error(png, "unexpected row size after conversion");
  out->height = h;
  out->width = w;
  out->rgb.resize(static_cast<size_t>(w) * h * 3);
  for (int p = 0; p < passes; ++p)
    for (png_uint_32 y = 0; y < h; ++y) png_read_row(png, out->rgb.data() + static_cast<size_t>(y) * w * 3, nullptr);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return kDecoded;
}

[[noreturn]] void too_large(const std::string& where, const char* kind, int64_t max_pixels) {
  throw_bad_input(where,
                  std::string(kind) + " image is larger than the limit of " + std::to_string(max_pixels) + " pixels");
}

// ---------------------------------------------------------------- resampling
// PIL's bilinear taps (ImagingResample's precompute_coeffs and normalize_coeffs_8bpc)
// for `out` samples over `in` source samples: output i reads sources first[i] ..
// first[i]+count[i]-1 with weights in fixed point of kPrecision fraction bits.
constexpr int kPrecision = 32 - 8 - 2;

struct Taps {
  int64_t width = 0;  // weights per output
  std::vector<int64_t> first, count;
  std::vector<int32_t> w;  // [out][width]
};

Taps bilinear_taps(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double filterscale = std::max(scale, 1.0), support = filterscale;
  Taps t;
  t.width = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  t.first.resize(static_cast<size_t>(out));
  t.count.resize(static_cast<size_t>(out));
  t.w.assign(static_cast<size_t>(out * t.width), 0);
  std::vector<double> w(static_cast<size_t>(t.width));
  for (int64_t i = 0; i < out; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    const int64_t lo = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
    const int64_t hi = std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in);
    double sum = 0;
    for (int64_t k = 0; k < hi - lo; ++k) {
      const double x = std::abs((static_cast<double>(k + lo) - center + 0.5) / filterscale);
      w[k] = x < 1 ? 1 - x : 0;
      sum += w[k];
    }
    for (int64_t k = 0; k < hi - lo; ++k) {
      const double v = (sum > 0 ? w[k] / sum : 0) * (1 << kPrecision);
      t.w[i * t.width + k] = static_cast<int32_t>(v < 0 ? std::trunc(v - 0.5) : std::trunc(v + 0.5));
    }
    t.first[i] = lo;
    t.count[i] = hi - lo;
  }
  return t;
}

// (sum + half) >> kPrecision, clamped to 8 bits.
uint8_t clip8(int64_t acc) { return static_cast<uint8_t>(std::clamp<int64_t>(acc >> kPrecision, 0, 255)); }

// Box b of `in` resampled to out_h x out_w; only the window win of that result is
// computed (rows and columns outside it are never read), into out (win's size).
void resample(const Image& in, const CropBox& b, int64_t out_h, int64_t out_w, const CropBox& win, Image& out) {
  if (b.top < 0 || b.left < 0 || b.height < 1 || b.width < 1 || b.top + b.height > in.height ||
      b.left + b.width > in.width || out_h < 1 || out_w < 1 || win.top < 0 || win.left < 0 ||
      win.top + win.height > out_h || win.left + win.width > out_w)
    throw_internal("resize_region", "crop box outside the image");
  const Taps tx = bilinear_taps(b.width, out_w), ty = bilinear_taps(b.height, out_h);
  // Horizontal pass over the source rows the window's vertical taps read, rounded to
  // 8 bits as PIL does, then the vertical pass.
  const int64_t y0 = ty.first[win.top], y1 = ty.first[win.top + win.height - 1] + ty.count[win.top + win.height - 1];
  const int64_t W = win.width;
  std::vector<uint8_t> mid(static_cast<size_t>(std::max<int64_t>(y1 - y0, 0) * W * 3));
  for (int64_t y = y0; y < y1; ++y) {
    const uint8_t* row = in.rgb.data() + ((b.top + y) * in.width + b.left) * 3;
    for (int64_t x = 0; x < W; ++x) {
      const int64_t ox = win.left + x;
      const int32_t* w = tx.w.data() + ox * tx.width;
      const uint8_t* src = row + tx.first[ox] * 3;
      int64_t acc[3] = {1 << (kPrecision - 1), 1 << (kPrecision - 1), 1 << (kPrecision - 1)};
      for (int64_t k = 0; k < tx.count[ox]; ++k)
        for (int c = 0; c < 3; ++c) acc[c] += int64_t{w[k]} * src[k * 3 + c];
      for (int c = 0; c < 3; ++c) mid[((y - y0) * W + x) * 3 + c] = clip8(acc[c]);
    }
  }
  out.height = win.height;
  out.width = W;
  out.rgb.resize(static_cast<size_t>(win.height * W * 3));
  for (int64_t y = 0; y < win.height; ++y) {
    const int64_t oy = win.top + y;
    const int32_t* w = ty.w.data() + oy * ty.width;
    const uint8_t* src = mid.data() + (ty.first[oy] - y0) * W * 3;
    for (int64_t x = 0; x < W * 3; ++x) {
      int64_t acc = 1 << (kPrecision - 1);
      for (int64_t k = 0; k < ty.count[oy]; ++k) acc += int64_t{w[k]} * src[k * W * 3 + x];
      out.rgb[y * W * 3 + x] = clip8(acc);
    }
  }
}

}  // namespace

Image decode_jpeg(const uint8_t* data, size_t size, const std::string& where, int64_t max_pixels) {
  Image im;
  JpegError err;
  err.message[0] = 0;
  DecodeStatus s = jpeg_decode_c(data, size, max_pixels, &im, &err);
  if (s == kTooLarge) too_large(where, "JPEG", max_pixels);
  if (s != kDecoded) throw_bad_input(where, std::string("corrupt or truncated JPEG: ") + err.message);
  return im;
}

Image decode_png(const uint8_t* data, size_t size, const std::string& where, int64_t max_pixels) {
  Image im;
  PngSource src{data, size, 0, {0}};
  DecodeStatus s = png_decode_c(&src, max_pixels, &im);
  if (s == kTooLarge) too_large(where, "PNG", max_pixels);
  if (s != kDecoded) throw_bad_input(where, std::string("corrupt or truncated PNG: ") + src.message);
  return im;
}

Image decode_image(const std::string& bytes, const std::string& where, int64_t max_pixels) {
  const auto* d = reinterpret_cast<const uint8_t*>(bytes.data());
  if (bytes.size() >= 3 && d[0] == 0xff && d[1] == 0xd8 && d[2] == 0xff)
    return decode_jpeg(d, bytes.size(), where, max_pixels);
  if (bytes.size() >= 8 && png_sig_cmp(d, 0, 8) == 0) return decode_png(d, bytes.size(), where, max_pixels);
  if (bytes.empty()) throw_bad_input(where, "empty file, expected a JPEG or PNG image");
  throw_bad_input(where, "not a JPEG or PNG image (unknown signature)");
}

CropBox random_resized_crop(int64_t height, int64_t width, const std::function<double()>& uniform01) {
  const double area = static_cast<double>(height * width);
  const double lo = std::log(3.0 / 4.0), hi = std::log(4.0 / 3.0);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * (0.08 + (1.0 - 0.08) * uniform01());
    const double aspect = std::exp(lo + (hi - lo) * uniform01());
    const auto w = static_cast<int64_t>(std::nearbyint(std::sqrt(target * aspect)));  // half to even, as round()
    const auto h = static_cast<int64_t>(std::nearbyint(std::sqrt(target / aspect)));
    if (0 < w && w <= width && 0 < h && h <= height) {
      const auto top = static_cast<int64_t>(uniform01() * static_cast<double>(height - h + 1));
      const auto left = static_cast<int64_t>(uniform01() * static_cast<double>(width - w + 1));
      return {top, left, h, w};
    }
  }
  // Fallback: the centre crop of the largest box whose aspect is within [3/4, 4/3].
  const double in_ratio = static_cast<double>(width) / static_cast<double>(height);
  int64_t w = width, h = height;
  if (in_ratio < 3.0 / 4.0)
    h = static_cast<int64_t>(std::nearbyint(static_cast<double>(w) / (3.0 / 4.0)));
  else if (in_ratio > 4.0 / 3.0)
    w = static_cast<int64_t>(std::nearbyint(static_cast<double>(h) * (4.0 / 3.0)));
  return {(height - h) / 2, (width - w) / 2, h, w};
}

std::pair<int64_t, int64_t> resize_shorter(int64_t height, int64_t width, int64_t shorter) {
  if (width <= height) return {shorter * height / width, shorter};
  return {shorter, shorter * width / height};
}

CropBox center_crop(int64_t height, int64_t width, int64_t size) {
  auto offset = [](int64_t have, int64_t want) {
    return static_cast<int64_t>(std::nearbyint(static_cast<double>(have - want) / 2.0));
  };
  return {offset(height, size), offset(width, size), size, size};
}

void resize_region(const Image& in, const CropBox& b, int64_t out_h, int64_t out_w, Image& out) {
  resample(in, b, out_h, out_w, {0, 0, out_h, out_w}, out);
}

void image_to_chw(const Image& im, bool flip, const float* mean, const float* std, float* out) {
  const int64_t H = im.height, W = im.width;
  for (int c = 0; c < 3; ++c) {
    float lut[256];
    for (int v = 0; v < 256; ++v) lut[v] = (static_cast<float>(v) / 255.f - mean[c]) / std[c];
    float* o = out + c * H * W;
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) o[y * W + x] = lut[im.rgb[(y * W + (flip ? W - 1 - x : x)) * 3 + c]];
  }
}

Image eval_transform(const Image& im, int64_t size) {
  const auto shorter = static_cast<int64_t>(std::nearbyint(static_cast<double>(size) / 0.875));
  const auto [h, w] = resize_shorter(im.height, im.width, shorter);
  Image out;  // only the centre crop of the resized image is computed
  resample(im, {0, 0, im.height, im.width}, h, w, center_crop(h, w, size), out);
  return out;
}

Image train_transform(const Image& im, int64_t size, const std::function<double()>& uniform01) {
  Image out;
  resize_region(im, random_resized_crop(im.height, im.width, uniform01), size, size, out);
  return out;
}

}  // namespace trainrt
