// Image-classification datasets read from local files into memory.
//
//   DatasetOptions o;                        // Fashion-MNIST from the Debian package
//   o.name = "fashion-mnist"; o.train = true; o.limit = 1000;
//   Dataset d = load_dataset(o);             // d.images uint8 [1000,1,28,28], d.labels int64 [1000]
//
//   o.name = "cifar100"; o.data_dir = "/data";   // /data/train.bin or /data/cifar-100-binary/train.bin
//
// Formats (all checked; a bad file is a BadInput Error "<file>: <what is wrong>"):
//   IDX (MNIST, Fashion-MNIST), gzipped or raw (told apart by the gzip magic 1f 8b):
//     images: big-endian u32 magic 0x00000803, n, rows, cols, then n*rows*cols bytes;
//     labels: big-endian u32 magic 0x00000801, n, then n bytes (each < 10).
//   CIFAR-10 binary: data_batch_1..5.bin / test_batch.bin, records of
//     1 label byte + 3072 pixel bytes (1024 R, 1024 G, 1024 B: already C,H,W).
//   CIFAR-100 binary: train.bin / test.bin, records of coarse label byte,
//     fine label byte + 3072 pixel bytes; the fine label (100 classes) is used.
//   Image folder (torchvision's ImageFolder): <dir>/train/<class>/<image>, and
//     <dir>/val/<class>/<image> for the test split; classes are the train/ subfolders
//     sorted by name (class index = position), files sorted by name, extensions
//     .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp case-insensitively (torchvision's
//     IMG_EXTENSIONS; only JPEG and PNG content decodes). Only the file list is read
//     here: images are decoded when their batch is prepared (datasets/pipeline.h).
//     A class folder without images, or a val/ class that train/ lacks, is an error.
//   npz (numpy.savez / savez_compressed): arrays x (float32, float64 or uint8, shape
//     N x ... of any rank: [N,C,H,W] images, [N,C,L] audio, [N,C,D,H,W] video; or signed
//     integer token ids, [N,T] for a text model) and y (integer labels, N); the test split
//     is x_val/y_val when present, else the training arrays. Stored and deflated members;
//     float64 becomes float32, int8..int32 ids become int64 (batched as they are, never
//     normalised or augmented: the model's input must then be int64).
//
// Why in memory as uint8: the largest set (CIFAR, 50000x3x32x32) is 150 MB as
// bytes; the pipeline (datasets/pipeline.h) converts to normalised float32 per batch.
// Mean/std are per channel in [0,1] units, the values of the seed's transforms.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/tensor.h"

namespace trainrt {

struct Dataset {
  std::string name;    // "fashion-mnist", "mnist", "cifar10", "cifar100", "imagefolder", "npz"
  std::string source;  // file or folder it was read from (error messages)
  Tensor images;       // uint8 [N,C,H,W] (npz: uint8, float32 or int64 ids [N,...]); empty for an image folder
  Tensor labels;       // int64 [N], each in [0, classes)
  int64_t classes = 0;
  std::vector<float> mean;  // [C] (or one value for all), of x/255 for uint8, of x for float32
  std::vector<float> std;   // [C] (or one value for all)
  // Image folders: sample i is files[i], decoded and transformed to 3 x image_size x
  // image_size when its batch is prepared; class_names[k] is class k's folder.
  std::vector<std::string> files, class_names;
  int64_t image_size = 0;

  int64_t size() const { return labels.empty() ? 0 : labels.dims()[0]; }
  bool from_files() const { return !files.empty() || name == "imagefolder"; }
  // Shape of one sample as the pipeline delivers it (C,H,W for images).
  std::vector<int64_t> sample_dims() const;
  int64_t sample_numel() const;
  int64_t channels() const { return sample_dims()[0]; }
  int64_t height() const { return sample_dims()[1]; }
  int64_t width() const { return sample_dims()[2]; }
  int64_t sample_bytes() const { return sample_numel() * static_cast<int64_t>(dtype_size(images.dtype())); }
  const uint8_t* image(int64_t i) const { return images.data<uint8_t>() + i * sample_numel(); }
  int64_t label(int64_t i) const { return labels.data<int64_t>()[i]; }
};

struct DatasetOptions {
  std::string name = "fashion-mnist";           // fashion-mnist | mnist | cifar10 | cifar100 | imagefolder | npz
  std::string data_dir;                         // "" = default_data_dir(name) (fashion-mnist only)
  bool train = true;                            // train split, else the test split
  int64_t limit = 0;                            // > 0: keep only the first `limit` samples
  uint64_t max_file_bytes = uint64_t{4} << 30;  // per file, after decompression
  int64_t image_size = 224;                     // imagefolder: the side of the square crops
};

// The folder used when --data-dir is not given ("" when there is none).
std::string default_data_dir(const std::string& name);
Dataset load_dataset(const DatasetOptions& opts);

// The pieces, for tests and other tools.
// IDX images as uint8 [N,1,rows,cols]; labels as int64 [N] each < classes.
Tensor read_idx_images(const std::string& path, uint64_t max_bytes);
Tensor read_idx_labels(const std::string& path, int64_t classes, uint64_t max_bytes);
// Whole file, gunzipped when it starts with 1f 8b; over max_bytes is an error.
std::string read_maybe_gzip(const std::string& path, uint64_t max_bytes);

// Arrays of a numpy .npz file by name (npy header checked: dtype, order, shape, size).
std::map<std::string, Tensor> read_npz(const std::string& path, uint64_t max_bytes);
// One .npy file's bytes as a tensor; `where` names it in errors.
Tensor parse_npy(const std::string& bytes, const std::string& where);
// torchvision's IMG_EXTENSIONS, case-insensitively.
bool has_image_extension(const std::string& filename);

// Keeps the first n samples (a copy); n >= size() returns d unchanged.
Dataset take_first(const Dataset& d, int64_t n);
// Samples [begin, begin+n) as a dataset of their own (a rank's share of the test set).
Dataset take_range(const Dataset& d, int64_t begin, int64_t n);

}  // namespace trainrt
