// The on-disk checkpoint formats, kept apart from CheckpointManager so that they can be tested and
// fuzzed without an object store: shard blobs (safetensors layout), their assembly into full
// tensors, and the manifest. Everything here reads untrusted bytes.
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <charconv>
#include <cstring>
#include <limits>
#include <set>
#include <stdexcept>
#include <utility>

#include "trainer/checkpoint.h"

namespace mltrain {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoint tensors are written little-endian");

// A name from an untrusted blob, shortened for an error message.
std::string Shown(const std::string& name) { return name.size() > 80 ? name.substr(0, 80) + "..." : name; }

// data_offsets[i] of a tensor header entry: an unsigned JSON integer.
uint64_t DataOffset(const nlohmann::json& info, size_t i, const std::string& name) {
  auto it = info.find("data_offsets");
  if (it == info.end() || !it->is_array() || it->size() != 2 || !(*it)[i].is_number_unsigned())
    throw std::runtime_error("shard tensor '" + Shown(name) + "' has no data_offsets pair of unsigned integers");
  return (*it)[i].get<uint64_t>();
}

// A "__metadata__" value holding a decimal int64, e.g. "params.begin": "120". Strict: the whole
// string, no blanks, no '+'.
int64_t MetadataInt(const nlohmann::json& meta, const std::string& key) {
  auto it = meta.find(key);
  if (it == meta.end() || !it->is_string())
    throw std::runtime_error("shard metadata '" + Shown(key) + "' is missing or not a string");
  const std::string& text = it->get_ref<const std::string&>();
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size())
    throw std::runtime_error("shard metadata '" + Shown(key) + "' is not a 64-bit integer: '" + Shown(text) + "'");
  return value;
}

// One tensor of a shard: `info` is its header entry, `data` the bytes after the header.
ShardTensor DecodeTensor(const std::string& name, const nlohmann::json& info, const nlohmann::json& meta,
                         std::span<const uint8_t> data) {
  if (!info.is_object()) throw std::runtime_error("shard tensor '" + Shown(name) + "' is not a JSON object");
  auto dtype = info.find("dtype");
  if (dtype == info.end() || *dtype != "F32") throw std::runtime_error("shard tensor '" + Shown(name) + "' is not F32");
  const uint64_t b = DataOffset(info, 0, name), e = DataOffset(info, 1, name);
  if (b > e || e > data.size() || (e - b) % sizeof(float) != 0)
    throw std::runtime_error("shard tensor '" + Shown(name) + "' has data offsets outside the blob");
  ShardTensor t;
  t.name = name;
  t.begin = MetadataInt(meta, name + ".begin");
  t.total = MetadataInt(meta, name + ".total");
  const int64_t count = static_cast<int64_t>((e - b) / sizeof(float));  // <= blob size: no overflow
  // Written so that nothing overflows: begin + count > total  <=>  count > total - begin.
  if (t.begin < 0 || t.total < 0 || t.begin > t.total || count > t.total - t.begin)
    throw std::runtime_error("shard tensor '" + Shown(name) + "' has a range outside its buffer");
  t.values.resize(static_cast<size_t>(count));
  if (count > 0) std::memcpy(t.values.data(), data.data() + b, e - b);
  return t;
}

// An integer field of a JSON object that fits T; false when absent, not an integer, or out of range.
template <typename T>
bool IntegerField(const nlohmann::json& obj, const char* key, T& out) {
  auto it = obj.find(key);
  if (it == obj.end()) return false;
  if (it->is_number_unsigned()) {
    const uint64_t v = it->get<uint64_t>();
    if (!std::in_range<T>(v)) return false;
    out = static_cast<T>(v);
    return true;
  }
  if (it->is_number_integer()) {
    const int64_t v = it->get<int64_t>();
    if (!std::in_range<T>(v)) return false;
    out = static_cast<T>(v);
    return true;
  }
  return false;
}

bool KeyChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
}

// Reads manifest["shards"] into `out`; returns "" or what is wrong.
std::string ReadManifestShards(const nlohmann::json& shards, std::vector<ManifestShard>& out) {
  if (!shards.is_array()) return "'shards' is not an array";
  if (shards.size() > kMaxManifestShards) return "more than " + std::to_string(kMaxManifestShards) + " shards";
  for (const nlohmann::json& s : shards) {
    const std::string which = "shard #" + std::to_string(out.size());
    if (!s.is_object()) return which + " is not an object";
    ManifestShard shard;
    auto key = s.find("key");
    if (key == s.end() || !key->is_string()) return which + ": 'key' is missing or not a string";
    shard.key = key->get<std::string>();
    if (!IsSafeShardKey(shard.key)) return which + ": key '" + Shown(shard.key) + "' is not a plain relative name";
    if (!IntegerField(s, "bytes", shard.bytes)) return which + ": 'bytes' is missing or not an unsigned integer";
    if (!IntegerField(s, "crc32", shard.crc32)) return which + ": 'crc32' is missing or not a 32-bit unsigned integer";
    out.push_back(std::move(shard));
  }
  return "";
}

}  // namespace

uint32_t Crc32(std::span<const uint8_t> blob) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  return static_cast<uint32_t>(crc32_z(crc, blob.data(), blob.size()));
}

std::vector<uint8_t> EncodeShard(const std::vector<ShardTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::json header;
  nlohmann::json meta(metadata);
  uint64_t offset = 0;
  for (const ShardTensor& t : tensors) {
    uint64_t bytes = t.values.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", {t.values.size()}}, {"data_offsets", {offset, offset + bytes}}};
    meta[t.name + ".begin"] = std::to_string(t.begin);
    meta[t.name + ".total"] = std::to_string(t.total);
    offset += bytes;
  }
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + text.size() + offset);
  uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* data = out.data() + 8 + text.size();
  for (const ShardTensor& t : tensors) {
    if (t.values.empty()) continue;  // data() may be null: memcpy's arguments must not be
    std::memcpy(data, t.values.data(), t.values.size() * sizeof(float));
    data += t.values.size() * sizeof(float);
  }
  return out;
}

std::vector<ShardTensor> DecodeShard(std::span<const uint8_t> blob) {
  if (blob.size() < 8) throw std::runtime_error("shard is truncated (no header length)");
  uint64_t len = 0;
  std::memcpy(&len, blob.data(), 8);
  if (len > blob.size() - 8) throw std::runtime_error("shard is truncated (header length " + std::to_string(len) + ")");
  if (len > kMaxShardHeaderBytes)
    throw std::runtime_error("shard header is " + std::to_string(len) + " bytes (at most " + std::to_string(kMaxShardHeaderBytes) + ")");
  const std::span<const uint8_t> text = blob.subspan(8, static_cast<size_t>(len)), data = blob.subspan(8 + static_cast<size_t>(len));
  nlohmann::json header = nlohmann::json::parse(text.begin(), text.end(), nullptr, false);
  if (header.is_discarded() || !header.is_object()) throw std::runtime_error("shard header is not valid JSON");
  nlohmann::json meta = nlohmann::json::object();
  if (auto it = header.find("__metadata__"); it != header.end()) meta = *it;
  if (!meta.is_object()) throw std::runtime_error("shard __metadata__ is not a JSON object");
  if (header.size() > kMaxShardTensors + 1)
    throw std::runtime_error("shard has " + std::to_string(header.size()) + " header entries (at most " +
                             std::to_string(kMaxShardTensors) + " tensors)");
  std::vector<ShardTensor> out;
  for (const auto& [name, info] : header.items()) {
    if (name != "__metadata__") out.push_back(DecodeTensor(name, info, meta, data));
  }
  return out;
}

std::map<std::string, std::vector<float>> AssembleTensors(std::vector<ShardTensor> pieces, int64_t total) {
  static const std::set<std::string> kNames{"params", "first_moment", "second_moment"};
  std::map<std::string, std::vector<ShardTensor*>> by_name;
  for (ShardTensor& t : pieces) {
    const int64_t count = static_cast<int64_t>(t.values.size());
    if (kNames.count(t.name) == 0 || t.total != total)
      throw std::runtime_error("unexpected tensor '" + Shown(t.name) + "' of " + std::to_string(t.total) +
                               " elements (the manifest says " + std::to_string(total) + ")");
    if (t.begin < 0 || t.begin > total || count > total - t.begin)
      throw std::runtime_error("tensor '" + t.name + "' has a range outside its buffer");
    by_name[t.name].push_back(&t);
  }
  std::map<std::string, std::vector<float>> out;
  for (auto& [name, list] : by_name) {
    std::sort(list.begin(), list.end(), [](const ShardTensor* a, const ShardTensor* b) { return a->begin < b->begin; });
    int64_t next = 0;  // <= total throughout: each piece ends inside [0, total]
    for (const ShardTensor* p : list) {
      if (p->begin < next) throw std::runtime_error("tensor '" + name + "': pieces overlap at element " + std::to_string(p->begin));
      if (p->begin > next) throw std::runtime_error("tensor '" + name + "': gap at element " + std::to_string(next));
      next += static_cast<int64_t>(p->values.size());
    }
    if (next != total)
      throw std::runtime_error("tensor '" + name + "' covers " + std::to_string(next) + " of " + std::to_string(total) + " elements");
    std::vector<float>& buf = out[name];
    if (list.size() == 1) {
      buf = std::move(list.front()->values);
      continue;
    }
    buf.reserve(static_cast<size_t>(total));  // == the elements read, not a number taken from a header
    for (ShardTensor* p : list) {
      buf.insert(buf.end(), p->values.begin(), p->values.end());
      std::vector<float>().swap(p->values);  // keep the peak near one copy of the data
    }
  }
  return out;
}

bool IsSafeShardKey(std::string_view key) {
  if (key.empty() || key.size() > kMaxShardKeyBytes) return false;
  size_t start = 0;
  while (true) {
    const size_t slash = key.find('/', start);
    const std::string_view part = key.substr(start, slash == std::string_view::npos ? std::string_view::npos : slash - start);
    if (part.empty() || part == "." || part == ".." || !std::all_of(part.begin(), part.end(), KeyChar)) return false;
    if (slash == std::string_view::npos) return true;
    start = slash + 1;
  }
}

std::optional<CheckpointManifest> ParseManifest(std::span<const uint8_t> blob, std::string* error) {
  auto fail = [&](const std::string& why) {
    *error = "manifest.json: " + why;
    return std::nullopt;
  };
  nlohmann::json m = nlohmann::json::parse(blob.begin(), blob.end(), nullptr, false);
  if (m.is_discarded() || !m.is_object()) return fail("not a JSON object");
  auto format = m.find("format");
  if (format == m.end() || *format != kCheckpointFormat) return fail("not a " + std::string(kCheckpointFormat) + " manifest");
  CheckpointManifest out;
  const std::pair<const char*, int64_t*> counts[] = {
      {"step", &out.step}, {"epoch", &out.epoch}, {"sample_cursor", &out.sample_cursor}, {"parameter_count", &out.parameter_count}};
  for (const auto& [key, field] : counts) {
    if (!IntegerField(m, key, *field) || *field < 0) return fail(std::string("'") + key + "' is missing or not an integer >= 0");
  }
  if (!IntegerField(m, "seed", out.seed)) return fail("'seed' is missing or not an unsigned 64-bit integer");
  auto config = m.find("config");
  if (config == m.end() || !config->is_object()) return fail("'config' is missing or not an object");
  out.config = *config;
  auto shards = m.find("shards");
  if (shards == m.end()) return fail("'shards' is missing");
  if (std::string why = ReadManifestShards(*shards, out.shards); !why.empty()) return fail(why);
  return out;
}

}  // namespace mltrain
