// S3 (and S3-compatible servers) through libcurl with its built-in AWS SigV4 signing.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "trainer/object_store.h"

namespace mltrain {

/// "s3://bucket/prefix" split into its parts (prefix without leading/trailing '/').
struct S3Location {
  std::string bucket;
  std::string prefix;
  /// Throws std::invalid_argument naming the URL when the bucket is missing.
  static S3Location Parse(const std::string& url);
};

/// Endpoint, region and keys, from AWS_ENDPOINT_URL (optional; implies path-style addressing,
/// e.g. http://127.0.0.1:4568), AWS_REGION (or AWS_DEFAULT_REGION, default us-east-1),
/// AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (required) and AWS_SESSION_TOKEN (optional).
struct S3Credentials {
  std::string endpoint;
  std::string region = "us-east-1";
  std::string access_key_id;
  std::string secret_access_key;
  std::string session_token;
  /// Throws std::invalid_argument naming the missing variable.
  static S3Credentials FromEnv();
};

/// RFC 3986 percent-encoding as SigV4 requires (unreserved characters kept; '/' kept when
/// keep_slash, for object keys).
std::string UriEncode(const std::string& s, bool keep_slash);

/// Hex SHA-256 of `data` (the x-amz-content-sha256 payload hash).
std::string Sha256Hex(std::span<const uint8_t> data);

/// Sorted, encoded canonical query string ("a=1&b=x%2Fy"): libcurl 7.88 signs the query exactly as
/// given, so the URL must carry it in SigV4's canonical order.
std::string CanonicalQuery(const std::map<std::string, std::string>& params);

/// Every text of <tag>...</tag> in an S3 XML answer, in order, with the five predefined XML
/// entities unescaped. Tags are matched literally (S3 writes no attributes on the ones we read).
std::vector<std::string> XmlTexts(const std::string& xml, const std::string& tag);

/// One page of a ListObjectsV2 answer.
struct S3ListPage {
  std::vector<std::string> keys;  ///< without the store's root ("prefix/")
  std::string next_token;         ///< NextContinuationToken when IsTruncated is "true", else empty
};

/// Parses a ListObjectsV2 answer of a listing under `root` (the store's "prefix/", or ""). Keys
/// that do not start with `root` are dropped. Never throws.
S3ListPage ParseListObjectsV2(const std::string& xml, const std::string& root);

/// An ObjectStore on one bucket/prefix. Requests are signed by libcurl (CURLOPT_AWS_SIGV4,
/// "aws:amz:REGION:s3") with x-amz-content-sha256 set to the payload hash; transient failures
/// (connection errors, HTTP 5xx) are retried 3 times with backoff. Blobs above the multipart
/// threshold use CreateMultipartUpload / UploadPart / CompleteMultipartUpload (aborted on error).
class S3Store final : public ObjectStore {
 public:
  /// Blobs above multipart_threshold bytes are uploaded in parts of part_size bytes (S3 requires
  /// >= 5 MiB per part except the last; S3-compatible test servers accept less).
  S3Store(S3Location location, S3Credentials credentials, size_t multipart_threshold, size_t part_size = 8u << 20);
  std::string Describe() const override;
  void Put(const std::string& key, std::span<const uint8_t> data) override;
  std::optional<std::vector<uint8_t>> Get(const std::string& key) override;
  std::vector<std::string> List(const std::string& prefix) override;
  void Delete(const std::string& key) override;

  /// One HTTP exchange's result.
  struct Response {
    long status = 0;
    std::string body;
    std::map<std::string, std::string> headers;  ///< lower-case names
  };

 private:
  std::string ObjectUrl(const std::string& full_key, const std::string& query) const;
  std::string FullKey(const std::string& key) const;
  Response Send(const std::string& method, const std::string& url, std::span<const uint8_t> body,
                const std::string& content_type);
  void PutMultipart(const std::string& full_key, std::span<const uint8_t> data);

  S3Location location_;
  S3Credentials credentials_;
  size_t multipart_threshold_;
  size_t part_size_;
};

}  // namespace mltrain
