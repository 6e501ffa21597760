// Where checkpoints go: a directory (file:///dir) or an S3 bucket (s3://bucket/prefix).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace mltrain {

/// A flat key space of immutable blobs under one root. Keys use '/' separators ("step-5/shard-0").
/// Errors (I/O, HTTP) throw std::runtime_error naming the key and the cause.
class ObjectStore {
 public:
  virtual ~ObjectStore() = default;
  /// The root as a URL, for logs and error messages.
  virtual std::string Describe() const = 0;
  /// Writes the whole blob; readers never see a partial blob under `key`.
  virtual void Put(const std::string& key, std::span<const uint8_t> data) = 0;
  /// The blob, or nullopt when `key` does not exist.
  virtual std::optional<std::vector<uint8_t>> Get(const std::string& key) = 0;
  /// All keys that start with `prefix`, in any order.
  virtual std::vector<std::string> List(const std::string& prefix) = 0;
  /// Removes `key`; a missing key is not an error.
  virtual void Delete(const std::string& key) = 0;
};

/// A directory: Put writes a temporary file, fsyncs it and renames it into place.
class LocalDirStore final : public ObjectStore {
 public:
  explicit LocalDirStore(std::string root);
  std::string Describe() const override { return "file://" + root_; }
  void Put(const std::string& key, std::span<const uint8_t> data) override;
  std::optional<std::vector<uint8_t>> Get(const std::string& key) override;
  std::vector<std::string> List(const std::string& prefix) override;
  void Delete(const std::string& key) override;

 private:
  std::string root_;
};

/// Opens "file:///abs/dir" (or a plain path) or "s3://bucket[/prefix]" (S3Store, configured from
/// AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
/// `multipart_threshold` (bytes): S3 blobs larger than this are sent as a multipart upload in parts
/// of `part_size` bytes.
/// Throws std::invalid_argument naming the URL when its scheme or form is not supported.
std::unique_ptr<ObjectStore> OpenObjectStore(const std::string& url, size_t multipart_threshold, size_t part_size);

}  // namespace mltrain
