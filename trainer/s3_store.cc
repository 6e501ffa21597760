#include "trainer/s3_store.h"

#include <curl/curl.h>
#include <openssl/evp.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "trainer/log.h"

namespace mltrain {
namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? std::string(v) : fallback;
}

size_t WriteBody(char* p, size_t size, size_t n, void* user) {
  static_cast<std::string*>(user)->append(p, size * n);
  return size * n;
}

size_t WriteHeader(char* p, size_t size, size_t n, void* user) {
  std::string line(p, size * n);
  size_t colon = line.find(':');
  if (colon != std::string::npos) {
    std::string name = line.substr(0, colon);
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    value.erase(value.find_last_not_of(" \t\r\n") + 1);
    (*static_cast<std::map<std::string, std::string>*>(user))[name] = value;
  }
  return size * n;
}

struct ReadState {
  std::span<const uint8_t> data;
  size_t offset = 0;
};

size_t ReadBody(char* p, size_t size, size_t n, void* user) {
  auto* st = static_cast<ReadState*>(user);
  size_t count = std::min(size * n, st->data.size() - st->offset);
  std::memcpy(p, st->data.data() + st->offset, count);
  st->offset += count;
  return count;
}

}  // namespace

S3Location S3Location::Parse(const std::string& url) {
  if (url.rfind("s3://", 0) != 0) throw std::invalid_argument("'" + url + "' is not an s3:// URL");
  std::string rest = url.substr(5);
  size_t slash = rest.find('/');
  S3Location loc;
  loc.bucket = rest.substr(0, slash);
  if (slash != std::string::npos) loc.prefix = rest.substr(slash + 1);
  while (!loc.prefix.empty() && loc.prefix.back() == '/') loc.prefix.pop_back();
  if (loc.bucket.empty()) throw std::invalid_argument("checkpoint URL '" + url + "' names no bucket (expected s3://bucket/prefix)");
  return loc;
}

S3Credentials S3Credentials::FromEnv() {
  S3Credentials c;
  c.endpoint = EnvOr("AWS_ENDPOINT_URL", "");
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  c.region = EnvOr("AWS_REGION", EnvOr("AWS_DEFAULT_REGION", "us-east-1"));
  c.access_key_id = EnvOr("AWS_ACCESS_KEY_ID", "");
  c.secret_access_key = EnvOr("AWS_SECRET_ACCESS_KEY", "");
  c.session_token = EnvOr("AWS_SESSION_TOKEN", "");
  if (c.access_key_id.empty()) throw std::invalid_argument("AWS_ACCESS_KEY_ID must be set for an s3:// checkpoint URL");
  if (c.secret_access_key.empty()) throw std::invalid_argument("AWS_SECRET_ACCESS_KEY must be set for an s3:// checkpoint URL");
  return c;
}

std::string UriEncode(const std::string& s, bool keep_slash) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keep_slash && c == '/')) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string Sha256Hex(std::span<const uint8_t> data) {
  unsigned char digest[32];
  unsigned int len = 0;
  if (EVP_Digest(data.data(), data.size(), digest, &len, EVP_sha256(), nullptr) != 1) throw std::runtime_error("SHA-256 failed");
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (unsigned i = 0; i < len; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

std::string CanonicalQuery(const std::map<std::string, std::string>& params) {
  std::vector<std::pair<std::string, std::string>> encoded;
  for (const auto& [k, v] : params) encoded.emplace_back(UriEncode(k, false), UriEncode(v, false));
  std::sort(encoded.begin(), encoded.end());
  std::string out;
  for (const auto& [k, v] : encoded) out += (out.empty() ? "" : "&") + k + "=" + v;
  return out;
}

S3Store::S3Store(S3Location location, S3Credentials credentials, size_t multipart_threshold, size_t part_size)
    : location_(std::move(location)),
      credentials_(std::move(credentials)),
      multipart_threshold_(multipart_threshold),
      part_size_(std::max<size_t>(1, part_size)) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

std::string S3Store::Describe() const { return "s3://" + location_.bucket + (location_.prefix.empty() ? "" : "/" + location_.prefix); }

std::string S3Store::FullKey(const std::string& key) const { return location_.prefix.empty() ? key : location_.prefix + "/" + key; }

std::string S3Store::ObjectUrl(const std::string& full_key, const std::string& query) const {
  std::string url;
  if (!credentials_.endpoint.empty()) {
    url = credentials_.endpoint + "/" + location_.bucket + "/" + UriEncode(full_key, true);  // path-style
  } else {
    url = "https://" + location_.bucket + ".s3." + credentials_.region + ".amazonaws.com/" + UriEncode(full_key, true);
  }
  return query.empty() ? url : url + "?" + query;
}

S3Store::Response S3Store::Send(const std::string& method, const std::string& url, std::span<const uint8_t> body,
                                const std::string& content_type) {
  const std::string sigv4 = "aws:amz:" + credentials_.region + ":s3";
  const std::string userpwd = credentials_.access_key_id + ":" + credentials_.secret_access_key;
  std::string last_error;
  for (int attempt = 0; attempt < 4; ++attempt) {
    if (attempt > 0) std::this_thread::sleep_for(std::chrono::milliseconds(200 << attempt));
    CURL* curl = curl_easy_init();
    if (curl == nullptr) throw std::runtime_error("curl_easy_init failed");
    Response resp;
    curl_slist* headers = nullptr;
    headers = curl_slist_append(headers, ("x-amz-content-sha256: " + Sha256Hex(body)).c_str());
    if (!credentials_.session_token.empty())
      headers = curl_slist_append(headers, ("x-amz-security-token: " + credentials_.session_token).c_str());
    if (!content_type.empty()) headers = curl_slist_append(headers, ("Content-Type: " + content_type).c_str());
    ReadState reader{body, 0};
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_AWS_SIGV4, sigv4.c_str());
    curl_easy_setopt(curl, CURLOPT_USERPWD, userpwd.c_str());
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, WriteBody);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &resp.body);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, WriteHeader);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &resp.headers);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (method == "PUT" || method == "POST") {
      curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
      curl_easy_setopt(curl, CURLOPT_READFUNCTION, ReadBody);
      curl_easy_setopt(curl, CURLOPT_READDATA, &reader);
      curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body.size()));
      if (method == "POST") curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "POST");
    } else if (method == "DELETE") {
      curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "DELETE");
    } else if (method == "HEAD") {
      curl_easy_setopt(curl, CURLOPT_NOBODY, 1L);
    }
    CURLcode rc = curl_easy_perform(curl);
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &resp.status);
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    if (rc != CURLE_OK) {
      last_error = curl_easy_strerror(rc);
      continue;
    }
    if (resp.status >= 500) {
      last_error = "HTTP " + std::to_string(resp.status) + ": " + resp.body.substr(0, 300);
      continue;
    }
    return resp;
  }
  throw std::runtime_error(method + " " + url + " failed after 4 attempts: " + last_error);
}

void S3Store::Put(const std::string& key, std::span<const uint8_t> data) {
  const std::string full_key = FullKey(key);
  if (data.size() > multipart_threshold_) return PutMultipart(full_key, data);
  Response r = Send("PUT", ObjectUrl(full_key, ""), data, "application/octet-stream");
  if (r.status != 200) throw std::runtime_error("S3 PUT " + Describe() + "/" + key + ": HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
}

void S3Store::PutMultipart(const std::string& full_key, std::span<const uint8_t> data) {
  Response r = Send("POST", ObjectUrl(full_key, CanonicalQuery({{"uploads", ""}})), {}, "application/octet-stream");
  auto ids = XmlTexts(r.body, "UploadId");
  if (r.status != 200 || ids.empty())
    throw std::runtime_error("S3 CreateMultipartUpload " + full_key + ": HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
  const std::string upload_id = ids.front();
  try {
    std::string complete = "<CompleteMultipartUpload>";
    int part = 1;
    for (size_t off = 0; off < data.size(); off += part_size_, ++part) {
      auto chunk = data.subspan(off, std::min(part_size_, data.size() - off));
      std::string q = CanonicalQuery({{"partNumber", std::to_string(part)}, {"uploadId", upload_id}});
      Response p = Send("PUT", ObjectUrl(full_key, q), chunk, "");
      if (p.status != 200 || p.headers.count("etag") == 0)
        throw std::runtime_error("S3 UploadPart " + std::to_string(part) + " of " + full_key + ": HTTP " + std::to_string(p.status) + ": " + p.body.substr(0, 300));
      complete += "<Part><PartNumber>" + std::to_string(part) + "</PartNumber><ETag>" + p.headers["etag"] + "</ETag></Part>";
    }
    complete += "</CompleteMultipartUpload>";
    std::span<const uint8_t> body(reinterpret_cast<const uint8_t*>(complete.data()), complete.size());
    Response c = Send("POST", ObjectUrl(full_key, CanonicalQuery({{"uploadId", upload_id}})), body, "application/xml");
    if (c.status != 200 || c.body.find("<Error>") != std::string::npos)
      throw std::runtime_error("S3 CompleteMultipartUpload " + full_key + ": HTTP " + std::to_string(c.status) + ": " + c.body.substr(0, 300));
  } catch (const std::exception&) {
    try {
      Send("DELETE", ObjectUrl(full_key, CanonicalQuery({{"uploadId", upload_id}})), {}, "");
    } catch (const std::exception& e) {
      LogWarn(std::string("could not abort multipart upload: ") + e.what());
    }
    throw;
  }
}

std::optional<std::vector<uint8_t>> S3Store::Get(const std::string& key) {
  Response r = Send("GET", ObjectUrl(FullKey(key), ""), {}, "");
  if (r.status == 404) return std::nullopt;
  if (r.status != 200) throw std::runtime_error("S3 GET " + Describe() + "/" + key + ": HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
  return std::vector<uint8_t>(r.body.begin(), r.body.end());
}

std::vector<std::string> S3Store::List(const std::string& prefix) {
  const std::string root = location_.prefix.empty() ? "" : location_.prefix + "/";
  std::vector<std::string> keys;
  std::string token;
  while (true) {
    std::map<std::string, std::string> q{{"list-type", "2"}, {"prefix", root + prefix}};
    if (!token.empty()) q["continuation-token"] = token;
    std::string url = (!credentials_.endpoint.empty() ? credentials_.endpoint + "/" + location_.bucket
                                                      : "https://" + location_.bucket + ".s3." + credentials_.region + ".amazonaws.com") +
                      "/?" + CanonicalQuery(q);
    Response r = Send("GET", url, {}, "");
    if (r.status != 200) throw std::runtime_error("S3 LIST " + Describe() + ": HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
    S3ListPage page = ParseListObjectsV2(r.body, root);
    keys.insert(keys.end(), page.keys.begin(), page.keys.end());
    if (page.next_token.empty()) break;
    token = page.next_token;
  }
  return keys;
}

void S3Store::Delete(const std::string& key) {
  Response r = Send("DELETE", ObjectUrl(FullKey(key), ""), {}, "");
  if (r.status != 204 && r.status != 200 && r.status != 404)
    throw std::runtime_error("S3 DELETE " + Describe() + "/" + key + ": HTTP " + std::to_string(r.status) + ": " + r.body.substr(0, 300));
}

}  // namespace mltrain
