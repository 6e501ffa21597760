#include "agentd/cdi_spec.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace mlsched::agent {
namespace {

using json = nlohmann::json;

// A field of the spec that breaks a rule: caught by ParseCdiSpec and turned into its error.
struct SpecError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// libyaml's document tree turned into JSON values. Plain scalars are typed as YAML 1.1 does for
// what CDI uses: integers (decimal, 0x hex, 0o or leading-0 octal, as fileMode is often written),
// true/false, null/~; every quoted scalar is a string.
class YamlToJson {
 public:
  explicit YamlToJson(yaml_document_t* doc) : doc_(doc) {}

  json Convert(yaml_node_t* node, size_t depth) {
    if (++nodes_ > kMaxCdiNodes) throw SpecError("more than " + std::to_string(kMaxCdiNodes) + " YAML nodes");
    if (depth > kMaxCdiDepth) throw SpecError("nested deeper than " + std::to_string(kMaxCdiDepth) + " levels");
    switch (node->type) {
      case YAML_SCALAR_NODE:
        return Scalar(node);
      case YAML_SEQUENCE_NODE: {
        json out = json::array();
        for (yaml_node_item_t* i = node->data.sequence.items.start; i < node->data.sequence.items.top; ++i)
          out.push_back(Convert(yaml_document_get_node(doc_, *i), depth + 1));
        return out;
      }
      case YAML_MAPPING_NODE: {
        json out = json::object();
        for (yaml_node_pair_t* p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; ++p) {
          yaml_node_t* key = yaml_document_get_node(doc_, p->key);
          if (key->type != YAML_SCALAR_NODE) throw SpecError("a mapping key that is not a string");
          ++nodes_;
          out[Text(key)] = Convert(yaml_document_get_node(doc_, p->value), depth + 1);
        }
        return out;
      }
      default:
        return nullptr;
    }
  }

 private:
  static std::string Text(yaml_node_t* n) {
    return std::string(reinterpret_cast<const char*>(n->data.scalar.value), n->data.scalar.length);
  }
  static json Scalar(yaml_node_t* n) {
    std::string s = Text(n);
    if (n->data.scalar.style != YAML_PLAIN_SCALAR_STYLE) return s;
    if (s.empty() || s == "~" || s == "null" || s == "Null" || s == "NULL") return nullptr;
    if (s == "true" || s == "True" || s == "TRUE") return true;
    if (s == "false" || s == "False" || s == "FALSE") return false;
    const bool neg = s[0] == '-';
    std::string digits = neg ? s.substr(1) : s;
    int base = 10;
    if (digits.rfind("0x", 0) == 0) base = 16, digits = digits.substr(2);
    else if (digits.rfind("0o", 0) == 0) base = 8, digits = digits.substr(2);
    else if (digits.size() > 1 && digits[0] == '0') base = 8;
    if (digits.empty() || digits.size() > 18) return s;
    int64_t v = 0;
    for (char c : digits) {
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : 99;
      if (d >= base) return s;
      v = v * base + d;
    }
    return neg ? -v : v;
  }

  yaml_document_t* doc_;
  size_t nodes_ = 0;
};

json ParseYaml(std::string_view text, const std::string& file) {
  yaml_parser_t parser;
  yaml_document_t doc;
  if (!yaml_parser_initialize(&parser)) throw SpecError("cannot start the YAML parser");
  yaml_parser_set_input_string(&parser, reinterpret_cast<const unsigned char*>(text.data()), text.size());
  if (!yaml_parser_load(&parser, &doc)) {
    std::string err = file + ":" + std::to_string(parser.problem_mark.line + 1) + ":" +
                      std::to_string(parser.problem_mark.column + 1) + ": " +
                      (parser.problem ? parser.problem : "YAML syntax error");
    yaml_parser_delete(&parser);
    throw std::runtime_error(err);
  }
  yaml_parser_delete(&parser);
  json out;
  try {
    yaml_node_t* root = yaml_document_get_root_node(&doc);
    if (root) out = YamlToJson(&doc).Convert(root, 0);
  } catch (...) {
    yaml_document_delete(&doc);
    throw;
  }
  yaml_document_delete(&doc);
  return out;
}

// Typed reads of the tree; `where` is the field's path ("devices[2].containerEdits.mounts[0]").
const json* Field(const json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

std::string String(const json& v, const std::string& where) {
  if (!v.is_string()) throw SpecError(where + ": not a string");
  const auto& s = v.get_ref<const std::string&>();
  if (s.size() > kMaxCdiStringBytes) throw SpecError(where + ": longer than " + std::to_string(kMaxCdiStringBytes) + " bytes");
  if (s.find('\0') != std::string::npos) throw SpecError(where + ": holds a NUL byte");
  return s;
}

std::string OptString(const json& obj, const char* name, const std::string& where) {
  const json* v = Field(obj, name);
  return v ? String(*v, where.empty() ? name : where + "." + name) : "";
}

std::string AbsPath(const json& obj, const char* name, const std::string& where, bool required) {
  std::string p = OptString(obj, name, where);
  if (p.empty() && required) throw SpecError(where + "." + name + ": missing");
  if (!p.empty() && p[0] != '/') throw SpecError(where + "." + name + ": '" + p + "' is not an absolute path");
  return p;
}

const json& List(const json& v, const std::string& where) {
  if (!v.is_array()) throw SpecError(where + ": not a list");
  if (v.size() > kMaxCdiListEntries) throw SpecError(where + ": more than " + std::to_string(kMaxCdiListEntries) + " entries");
  return v;
}

std::vector<std::string> Strings(const json& obj, const char* name, const std::string& where) {
  std::vector<std::string> out;
  const json* v = Field(obj, name);
  if (!v) return out;
  const std::string w = where + "." + name;
  for (size_t i = 0; i < List(*v, w).size(); ++i) out.push_back(String((*v)[i], w + "[" + std::to_string(i) + "]"));
  return out;
}

int64_t OptInt(const json& obj, const char* name, const std::string& where, int64_t fallback) {
  const json* v = Field(obj, name);
  if (!v) return fallback;
  if (!v->is_number_integer() || v->get<int64_t>() < 0 || v->get<int64_t>() > 0xffffffffLL)
    throw SpecError(where + "." + name + ": not an integer in [0, 2^32)");
  return v->get<int64_t>();
}

const json& Object(const json& v, const std::string& where) {
  if (!v.is_object()) throw SpecError(where + ": not a mapping");
  return v;
}

CdiEdits ReadEdits(const json& v, const std::string& where) {
  CdiEdits e;
  Object(v, where);
  e.env = Strings(v, "env", where);
  for (size_t i = 0; i < e.env.size(); ++i)
    if (e.env[i].find('=') == std::string::npos || e.env[i][0] == '=')
      throw SpecError(where + ".env[" + std::to_string(i) + "]: '" + e.env[i] + "' is not NAME=VALUE");
  auto each = [&](const char* name, auto&& read) {
    const json* list = Field(v, name);
    if (!list) return;
    const std::string w = where + "." + name;
    for (size_t i = 0; i < List(*list, w).size(); ++i) {
      const std::string wi = w + "[" + std::to_string(i) + "]";
      read(Object((*list)[i], wi), wi);
    }
  };
  each("deviceNodes", [&](const json& d, const std::string& w) {
    CdiDeviceNode n;
    n.path = AbsPath(d, "path", w, true);
    n.host_path = AbsPath(d, "hostPath", w, false);
    n.type = OptString(d, "type", w);
    n.major = OptInt(d, "major", w, -1);
    n.minor = OptInt(d, "minor", w, -1);
    n.file_mode = static_cast<uint32_t>(OptInt(d, "fileMode", w, 0));
    e.device_nodes.push_back(std::move(n));
  });
  each("mounts", [&](const json& m, const std::string& w) {
    e.mounts.push_back({AbsPath(m, "hostPath", w, true), AbsPath(m, "containerPath", w, true), Strings(m, "options", w)});
  });
  each("hooks", [&](const json& h, const std::string& w) {
    CdiHook hook{OptString(h, "hookName", w), AbsPath(h, "path", w, true), Strings(h, "args", w)};
    if (hook.hook_name.empty()) throw SpecError(w + ".hookName: missing");
    e.hooks.push_back(std::move(hook));
  });
  return e;
}

CdiSpec ReadSpec(const json& root, const std::string& file) {
  CdiSpec spec;
  spec.file = file;
  Object(root, "the document");
  spec.cdi_version = OptString(root, "cdiVersion", "");
  spec.kind = OptString(root, "kind", "");
  const auto slash = spec.kind.find('/');
  if (spec.kind.empty()) throw SpecError("kind: missing");
  if (slash == std::string::npos || slash == 0 || slash + 1 == spec.kind.size())
    throw SpecError("kind: '" + spec.kind + "' is not VENDOR/CLASS");
  if (const json* e = Field(root, "containerEdits")) spec.edits = ReadEdits(*e, "containerEdits");
  const json* devices = Field(root, "devices");
  if (!devices) throw SpecError("devices: missing");
  for (size_t i = 0; i < List(*devices, "devices").size(); ++i) {
    const std::string w = "devices[" + std::to_string(i) + "]";
    const json& d = Object((*devices)[i], w);
    CdiDevice dev;
    dev.name = OptString(d, "name", w);
    if (dev.name.empty()) throw SpecError(w + ".name: missing");
    if (const json* e = Field(d, "containerEdits")) dev.edits = ReadEdits(*e, w + ".containerEdits");
    spec.devices.push_back(std::move(dev));
  }
  return spec;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Why root should not read `st` as a spec ("" when it may).
std::string Untrusted(const struct stat& st) {
  if (st.st_uid != 0) return "not owned by root";
  if (st.st_mode & (S_IWGRP | S_IWOTH)) return "writable by group or others";
  return "";
}

}  // namespace

Parsed<CdiSpec> ParseCdiSpec(std::string_view text, const std::string& file) {
  Parsed<CdiSpec> out;
  if (text.size() > kMaxCdiSpecBytes) {
    out.error = file + ": larger than " + std::to_string(kMaxCdiSpecBytes) + " bytes";
    return out;
  }
  try {
    json root;
    if (EndsWith(file, ".json")) {
      root = json::parse(text, nullptr, true);
      // nlohmann has no node budget: bound depth by walking (JSON has no aliases to expand).
      std::function<void(const json&, size_t)> walk = [&](const json& v, size_t depth) {
        if (depth > kMaxCdiDepth) throw SpecError("nested deeper than " + std::to_string(kMaxCdiDepth) + " levels");
        if (v.is_structured())
          for (const auto& c : v) walk(c, depth + 1);
      };
      walk(root, 0);
    } else {
      root = ParseYaml(text, file);
    }
    out.value = ReadSpec(root, file);
  } catch (const SpecError& e) {
    out.error = file + ": " + e.what();
  } catch (const json::exception& e) {
    out.error = file + ": " + e.what();
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

std::vector<CdiSpec> LoadCdiSpecs(const std::vector<std::string>& dirs, std::vector<std::string>* errors) {
  std::vector<CdiSpec> out;
  for (const auto& dir : dirs) {
    struct stat st{};
    if (stat(dir.c_str(), &st) != 0) continue;
    if (!S_ISDIR(st.st_mode)) {
      errors->push_back(dir + ": not a directory");
      continue;
    }
    if (auto why = Untrusted(st); !why.empty()) {
      errors->push_back(dir + ": " + why + "; its CDI specs are not read");
      continue;
    }
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string n = e.path().filename().string();
      if (EndsWith(n, ".yaml") || EndsWith(n, ".yml") || EndsWith(n, ".json")) names.push_back(n);
      if (names.size() > kMaxCdiListEntries) break;
    }
    std::sort(names.begin(), names.end());
    for (const auto& n : names) {
      const std::string path = dir + "/" + n;
      const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
      if (fd < 0) {
        errors->push_back(path + ": " + std::strerror(errno));
        continue;
      }
      std::string why;
      if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) why = "not a regular file";
      else if (why = Untrusted(st); !why.empty()) {
      } else if (static_cast<size_t>(st.st_size) > kMaxCdiSpecBytes) {
        why = "larger than " + std::to_string(kMaxCdiSpecBytes) + " bytes";
      }
      std::string text;
      if (why.empty()) {
        char buf[65536];
        ssize_t got;
        while ((got = read(fd, buf, sizeof buf)) > 0 && text.size() <= kMaxCdiSpecBytes) text.append(buf, got);
        if (got < 0 || text.size() > kMaxCdiSpecBytes) why = "cannot read it whole within the limit";
      }
      close(fd);
      if (!why.empty()) {
        errors->push_back(path + ": " + why + "; not read");
        continue;
      }
      auto spec = ParseCdiSpec(text, path);
      if (!spec) errors->push_back(spec.error);
      else out.push_back(std::move(*spec.value));
    }
  }
  return out;
}

}  // namespace mlsched::agent
