// Fashion-MNIST as gzipped IDX files (the format of Debian's dataset-fashion-mnist).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mltrain {

/// Directory where Debian's dataset-fashion-mnist package installs the data.
inline constexpr const char* kDefaultFashionMnistDir = "/usr/share/datasets/fashion-mnist";

/// Labelled images held in memory: `images` is count x features, row-major, pixels scaled to [0,1].
struct Dataset {
  int64_t count = 0;
  int features = 0;            ///< rows * cols of one image (784 for Fashion-MNIST)
  int num_classes = 10;
  std::vector<float> images;   ///< count * features
  std::vector<uint8_t> labels; ///< count, each < num_classes

  const float* Image(int64_t i) const { return images.data() + i * features; }
};

enum class Split { kTrain, kTest };

/// Reads an IDX image file (magic 0x00000803, big-endian u32 count/rows/cols, then u8 pixels) and
/// its label file (magic 0x00000801), both gzip-compressed, as published by Xiao et al. (2017).
/// Reads at most `limit` samples when limit > 0 (only that prefix is decompressed).
/// Throws std::runtime_error naming the file when it is missing, truncated or malformed, or when
/// the image and label counts disagree.
Dataset LoadIdxPair(const std::string& images_path, const std::string& labels_path, int64_t limit);

/// Loads the train (train-*-ubyte.gz) or test (t10k-*-ubyte.gz) split of Fashion-MNIST from `dir`.
Dataset LoadFashionMnist(const std::string& dir, Split split, int64_t limit);

}  // namespace mltrain
