#include "agentd/eviction.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>

#include <ctime>

namespace mlsched::agent {
namespace {

size_t AppendBody(char* data, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(data, size * n);
  return size * n;
}

}  // namespace

EvictionPoller::EvictionPoller(std::string url, std::chrono::milliseconds interval, NoticeFn on_notice)
    : url_(std::move(url)), interval_(interval), on_notice_(std::move(on_notice)) {}

EvictionPoller::~EvictionPoller() { Stop(); }

void EvictionPoller::Start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void EvictionPoller::Stop() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<std::pair<long, std::string>> EvictionPoller::Fetch(const std::string& imds_token) {
  CURL* curl = curl_easy_init();
  if (!curl) return std::nullopt;
  std::string body;
  curl_slist* headers = curl_slist_append(nullptr, "Metadata-Flavor: Google");
  if (!imds_token.empty()) headers = curl_slist_append(headers, ("X-aws-ec2-metadata-token: " + imds_token).c_str());
  curl_easy_setopt(curl, CURLOPT_URL, url_.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  if (rc != CURLE_OK) {
    spdlog::debug("eviction poll of {} failed: {}", url_, curl_easy_strerror(rc));
    return std::nullopt;
  }
  return std::make_pair(status, body);
}

std::string EvictionPoller::FetchImdsToken() {
  size_t at = url_.find("/latest/");
  if (at == std::string::npos) return "";
  std::string token_url = url_.substr(0, at) + "/latest/api/token";
  CURL* curl = curl_easy_init();
  if (!curl) return "";
  std::string body;
  curl_slist* headers = curl_slist_append(nullptr, "X-aws-ec2-metadata-token-ttl-seconds: 21600");
  curl_easy_setopt(curl, CURLOPT_URL, token_url.c_str());
  curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, AppendBody);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 2000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_NOPROXY, "*");
  CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return rc == CURLE_OK && status == 200 ? TrimBlanks(body) : "";
}

void EvictionPoller::Loop() {
  std::string token, last_problem;
  for (;;) {
    auto response = Fetch(token);
    if (response && response->first == 401 && token.empty()) {
      token = FetchImdsToken();  // IMDSv2
      if (!token.empty()) response = Fetch(token);
    }
    if (response && response->first == 401) token.clear();  // expired token: fetch a new one next time
    if (response) {
      std::string problem;
      auto notice = ParseEvictionResponse(response->first, response->second, std::time(nullptr), &problem);
      if (notice) {
        spdlog::warn("eviction notice from {}: node reclaimed at {}", notice->source, notice->deadline);
        on_notice_(*notice);
        return;
      }
      if (!problem.empty() && problem != last_problem) spdlog::warn("eviction poll of {}: {}", url_, problem);
      last_problem = problem;
    }
    std::unique_lock lk(mu_);
    if (cv_.wait_for(lk, interval_, [&] { return stop_; })) return;
  }
}

}  // namespace mlsched::agent
