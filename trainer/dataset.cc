#include "trainer/dataset.h"

#include <zlib.h>

#include <memory>
#include <stdexcept>

namespace mltrain {
namespace {

constexpr uint32_t kImageMagic = 0x00000803;
constexpr uint32_t kLabelMagic = 0x00000801;
// Sanity bounds so a corrupt header cannot request gigabytes.
constexpr uint32_t kMaxSide = 4096;
constexpr uint32_t kMaxCount = 100'000'000;

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

GzFile Open(const std::string& path) {
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) throw std::runtime_error("cannot open dataset file '" + path + "' (missing? install dataset-fashion-mnist or pass --data-dir)");
  gzbuffer(f.get(), 1 << 20);
  return f;
}

void ReadExact(gzFile_s* f, void* out, size_t bytes, const std::string& path, const char* what) {
  size_t done = 0;
  auto* p = static_cast<unsigned char*>(out);
  while (done < bytes) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(bytes - done, 1u << 30));
    int n = gzread(f, p + done, chunk);
    if (n <= 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw std::runtime_error("dataset file '" + path + "' is truncated or corrupt while reading " + what +
                               (err != Z_OK && msg ? std::string(": ") + msg : std::string()));
    }
    done += static_cast<size_t>(n);
  }
}

uint32_t ReadBigEndian32(gzFile_s* f, const std::string& path, const char* what) {
  unsigned char b[4];
  ReadExact(f, b, 4, path, what);
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

Dataset LoadIdxPair(const std::string& images_path, const std::string& labels_path, int64_t limit) {
  GzFile img = Open(images_path);
  GzFile lab = Open(labels_path);
  uint32_t magic = ReadBigEndian32(img.get(), images_path, "the header");
  if (magic != kImageMagic)
    throw std::runtime_error("dataset file '" + images_path + "' is not an IDX image file (magic " + std::to_string(magic) + ")");
  uint32_t count = ReadBigEndian32(img.get(), images_path, "the header");
  uint32_t rows = ReadBigEndian32(img.get(), images_path, "the header");
  uint32_t cols = ReadBigEndian32(img.get(), images_path, "the header");
  if (count > kMaxCount || rows == 0 || cols == 0 || rows > kMaxSide || cols > kMaxSide)
    throw std::runtime_error("dataset file '" + images_path + "' has an implausible header (count " + std::to_string(count) +
                             ", " + std::to_string(rows) + "x" + std::to_string(cols) + ")");
  magic = ReadBigEndian32(lab.get(), labels_path, "the header");
  if (magic != kLabelMagic)
    throw std::runtime_error("dataset file '" + labels_path + "' is not an IDX label file (magic " + std::to_string(magic) + ")");
  uint32_t label_count = ReadBigEndian32(lab.get(), labels_path, "the header");
  if (label_count != count)
    throw std::runtime_error("dataset files disagree: '" + images_path + "' has " + std::to_string(count) + " images but '" +
                             labels_path + "' has " + std::to_string(label_count) + " labels");

  Dataset ds;
  ds.count = (limit > 0 && limit < static_cast<int64_t>(count)) ? limit : count;
  ds.features = static_cast<int>(rows * cols);
  std::vector<uint8_t> pixels(static_cast<size_t>(ds.count) * ds.features);
  ReadExact(img.get(), pixels.data(), pixels.size(), images_path, "pixels");
  ds.labels.resize(static_cast<size_t>(ds.count));
  ReadExact(lab.get(), ds.labels.data(), ds.labels.size(), labels_path, "labels");
  for (size_t i = 0; i < ds.labels.size(); ++i) {
    if (ds.labels[i] >= ds.num_classes)
      throw std::runtime_error("dataset file '" + labels_path + "' has label " + std::to_string(ds.labels[i]) +
                               " at index " + std::to_string(i) + " (expected 0-9)");
  }
  ds.images.resize(pixels.size());
  for (size_t i = 0; i < pixels.size(); ++i) ds.images[i] = static_cast<float>(pixels[i]) * (1.0f / 255.0f);
  return ds;
}

Dataset LoadFashionMnist(const std::string& dir, Split split, int64_t limit) {
  const char* stem = split == Split::kTrain ? "train" : "t10k";
  return LoadIdxPair(dir + "/" + stem + "-images-idx3-ubyte.gz", dir + "/" + stem + "-labels-idx1-ubyte.gz", limit);
}

}  // namespace mltrain
