#include "common/container_ref.h"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace mlsched {

namespace {

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsWordChar(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool IsTagChar(char c) { return IsWordChar(c) || c == '.' || c == '-'; }

std::string Quoted(const std::string& s) { return "'" + s.substr(0, 200) + (s.size() > 200 ? "...'" : "'"); }

// distribution/reference's path component: [a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*
bool IsPathComponent(const std::string& c) {
  if (c.empty() || !IsLowerAlnum(c.front()) || !IsLowerAlnum(c.back())) return false;
  for (size_t i = 0; i < c.size();) {
    if (IsLowerAlnum(c[i])) { ++i; continue; }
    size_t j = i;
    if (c[i] == '.') j = i + 1;
    else if (c[i] == '_') j = (i + 1 < c.size() && c[i + 1] == '_') ? i + 2 : i + 1;
    else if (c[i] == '-') { while (j < c.size() && c[j] == '-') ++j; }
    else return false;
    if (j >= c.size() || !IsLowerAlnum(c[j])) return false;
    i = j;
  }
  return true;
}

// A registry host: DNS labels of [A-Za-z0-9-] (not starting or ending with '-') joined by '.',
// with an optional :PORT (1-65535).
bool IsRegistry(const std::string& r) {
  const size_t colon = r.find(':');
  const std::string host = r.substr(0, colon);
  if (host.empty() || host.size() > 253) return false;
  std::stringstream in(host);
  for (std::string label; std::getline(in, label, '.');) {
    if (label.empty() || label.size() > 63 || label.front() == '-' || label.back() == '-') return false;
    for (char c : label)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') return false;
  }
  if (host.back() == '.') return false;
  if (colon == std::string::npos) return true;
  const std::string port = r.substr(colon + 1);
  if (port.empty() || port.size() > 5 || !std::all_of(port.begin(), port.end(), ::isdigit)) return false;
  const int p = std::stoi(port);
  return p >= 1 && p <= 65535;
}

std::string ParseDigest(const std::string& d, std::string* out) {
  static const std::string kSha = "sha256:";
  if (d.rfind(kSha, 0) != 0) return "digest " + Quoted(d) + " is not sha256:HEX (the only digest algorithm accepted)";
  const std::string hex = d.substr(kSha.size());
  if (hex.size() != 64 || !std::all_of(hex.begin(), hex.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
    return "digest " + Quoted(d) + " must be sha256: and 64 lowercase hex digits";
  *out = d;
  return "";
}

std::string ParseDocker(const std::string& text, ImageRef* out) {
  ImageRef r;
  r.transport = ImageTransport::kDocker;
  std::string rest = text;
  if (rest.empty()) return "empty image name";
  if (const size_t at = rest.find('@'); at != std::string::npos) {
    // NAME@DIGEST, or enroot's USER@REGISTRY#NAME / USER@REGISTRY/NAME: a name follows the '@'.
    if (rest.find_first_of("/#", at) != std::string::npos)
      return "credentials do not go in the image reference (" + Quoted(text) +
             "): name a registry credentials file instead";
    if (std::string err = ParseDigest(rest.substr(at + 1), &r.digest); !err.empty()) return err;
    rest = rest.substr(0, at);
  }
  // enroot's REGISTRY#NAME.
  if (const size_t hash = rest.find('#'); hash != std::string::npos) {
    r.registry = rest.substr(0, hash);
    if (!IsRegistry(r.registry)) return "registry " + Quoted(r.registry) + " is not HOST[:PORT]";
    // As docker tells a registry from a name: a '.', a port, or localhost (else it would read
    // back as a docker.io name).
    if (r.registry.find_first_of(".:") == std::string::npos && r.registry != "localhost")
      return "registry " + Quoted(r.registry) + " needs a '.', a :PORT or to be localhost";
    rest = rest.substr(hash + 1);
  }
  if (const size_t colon = rest.rfind(':'); colon != std::string::npos && rest.find('/', colon) == std::string::npos) {
    r.tag = rest.substr(colon + 1);
    rest = rest.substr(0, colon);
    if (r.tag.empty() || r.tag.size() > kMaxImageTagBytes || !IsWordChar(r.tag.front()) ||
        !std::all_of(r.tag.begin(), r.tag.end(), IsTagChar))
      return "tag " + Quoted(r.tag) + " must be 1 to 128 of [A-Za-z0-9_.-], starting with a letter, digit or '_'";
  }
  std::vector<std::string> parts;
  std::stringstream in(rest);
  for (std::string p; std::getline(in, p, '/');) parts.push_back(p);
  if (rest.empty() || rest.back() == '/') parts.push_back("");
  if (r.registry.empty() && parts.size() > 1 &&
      (parts[0].find_first_of(".:") != std::string::npos || parts[0] == "localhost")) {
    r.registry = parts[0];
    if (!IsRegistry(r.registry)) return "registry " + Quoted(r.registry) + " is not HOST[:PORT]";
    parts.erase(parts.begin());
  }
  for (const auto& p : parts) {
    if (p.empty()) return "image name " + Quoted(rest) + " has an empty path component";
    if (std::any_of(p.begin(), p.end(), [](char c) { return c >= 'A' && c <= 'Z'; }))
      return "image name " + Quoted(rest) + " must be lowercase";
    if (!IsPathComponent(p))
      return "image name component " + Quoted(p) + " must be [a-z0-9] runs joined by '.', '_', '__' or '-'";
  }
  if (r.registry.empty()) r.registry = "docker.io";
  if (r.registry == "docker.io" && parts.size() == 1) parts.insert(parts.begin(), "library");
  for (size_t i = 0; i < parts.size(); ++i) r.repository += (i ? "/" : "") + parts[i];
  if (r.registry.size() + 1 + r.repository.size() > kMaxImageNameBytes)
    return "image name " + Quoted(r.registry + "/" + r.repository) + " is longer than " +
           std::to_string(kMaxImageNameBytes) + " bytes";
  if (r.tag.empty() && r.digest.empty()) r.tag = "latest";
  *out = std::move(r);
  return "";
}

// PATH[:REF] of oci-archive: and oci: (skopeo splits at the first ':'), PATH of docker-archive:.
std::string ParseLocal(ImageTransport t, const std::string& what, const std::string& text, ImageRef* out) {
  ImageRef r;
  r.transport = t;
  const size_t colon = text.find(':');
  r.path = text.substr(0, colon);
  if (colon != std::string::npos) {
    if (t == ImageTransport::kDockerArchive)
      return what + " path " + Quoted(text) + " holds ':': name the archive alone (docker-archive:PATH)";
    r.tag = text.substr(colon + 1);
    if (r.tag.empty() || r.tag.size() > kMaxImageTagBytes || !std::all_of(r.tag.begin(), r.tag.end(), IsTagChar))
      return what + " reference " + Quoted(r.tag) + " must be 1 to 128 of [A-Za-z0-9_.-] (and the path may not hold ':')";
  }
  if (std::string err = CheckContainerPath(what + " path", r.path); !err.empty()) return err;
  *out = std::move(r);
  return "";
}

}  // namespace

std::string ImageRef::Canonical() const {
  switch (transport) {
    case ImageTransport::kDocker:
      return "docker://" + registry + "/" + repository + (tag.empty() ? "" : ":" + tag) + (digest.empty() ? "" : "@" + digest);
    case ImageTransport::kOciArchive: return "oci-archive:" + path + (tag.empty() ? "" : ":" + tag);
    case ImageTransport::kDockerArchive: return "docker-archive:" + path;
    case ImageTransport::kOciLayout: return "oci:" + path + (tag.empty() ? "" : ":" + tag);
  }
  return "";
}

std::string ParseImageRef(const std::string& text, ImageRef* out) {
  if (text.empty()) return "empty image reference";
  if (text.size() > kMaxImageRefBytes)
    return "image reference has " + std::to_string(text.size()) + " bytes; the limit is " + std::to_string(kMaxImageRefBytes);
  if (std::any_of(text.begin(), text.end(), [](unsigned char c) { return c <= ' ' || c == 0x7f; }))
    return "image reference " + Quoted(text) + " holds a space or a control character";
  struct Prefix { const char* text; ImageTransport t; };
  static const Prefix kLocal[] = {{"oci-archive:", ImageTransport::kOciArchive},
                                  {"docker-archive:", ImageTransport::kDockerArchive},
                                  {"oci:", ImageTransport::kOciLayout}};
  if (text.rfind("docker://", 0) == 0) return ParseDocker(text.substr(9), out);
  for (const auto& p : kLocal) {
    const std::string pre = p.text;
    if (text.rfind(pre, 0) == 0) return ParseLocal(p.t, pre.substr(0, pre.size() - 1), text.substr(pre.size()), out);
  }
  // Another transport (dir:, containers-storage:, docker-daemon:, https://, ...): a lowercase
  // word then ':' and something that is not a tag's start... A docker reference's first ':' is
  // its tag or port, after a name; "word:" followed by '/' or a known transport word is a scheme.
  static const char* kOther[] = {"dir", "containers-storage", "docker-daemon", "ostree", "sif", "tarball",
                                 "http", "https", "file", "enroot", "squashfs"};
  const size_t colon = text.find(':');
  if (colon != std::string::npos) {
    const std::string scheme = text.substr(0, colon);
    if (std::find(std::begin(kOther), std::end(kOther), scheme) != std::end(kOther) || text.compare(colon, 3, "://") == 0)
      return "unknown image transport '" + scheme.substr(0, 40) +
             ":' (use docker://, oci-archive:, docker-archive: or oci:)";
  }
  return ParseDocker(text, out);
}

std::string CheckContainerPath(const std::string& what, const std::string& path) {
  if (path.empty()) return what + " is empty";
  if (path.size() > kMaxContainerPathBytes)
    return what + " has " + std::to_string(path.size()) + " bytes; the limit is " + std::to_string(kMaxContainerPathBytes);
  if (path[0] != '/') return what + " " + Quoted(path) + " must be an absolute path";
  if (std::any_of(path.begin(), path.end(), [](unsigned char c) { return c < ' ' || c == 0x7f; }))
    return what + " " + Quoted(path) + " holds a control character";
  if (path.find_first_of(",:") != std::string::npos) return what + " " + Quoted(path) + " holds ',' or ':'";
  if (path == "/") return "";
  if (path.back() == '/') return what + " " + Quoted(path) + " ends with '/'";
  std::stringstream in(path.substr(1));
  for (std::string c; std::getline(in, c, '/');)
    if (c.empty() || c == "." || c == "..")
      return what + " " + Quoted(path) + " must be a clean path (no empty, '.' or '..' component)";
  return "";
}

std::string CheckContainerMount(const ContainerMountSpec& m, const std::vector<ContainerMountSpec>& before) {
  if (std::string err = CheckContainerPath("mount source", m.source); !err.empty()) return err;
  if (std::string err = CheckContainerPath("mount target", m.target); !err.empty()) return err;
  if (std::string err = CheckMountTarget(m.target); !err.empty()) return err;
  if (std::any_of(before.begin(), before.end(), [&](const ContainerMountSpec& o) { return o.target == m.target; }))
    return "mount target " + Quoted(m.target) + " is given twice";
  return "";
}

std::string CheckMountTarget(const std::string& target) {
  if (target == "/") return "mount target '/' would hide the image";
  for (const char* d : {"/proc", "/sys", "/dev"}) {
    const std::string dir = d;
    if (target == dir || target.rfind(dir + "/", 0) == 0)
      return "mount target " + Quoted(target) + " is under " + dir + ", which the runtime mounts itself";
  }
  return "";
}

std::string ParseContainerMounts(const std::string& text, std::vector<ContainerMountSpec>* out) {
  std::vector<ContainerMountSpec> mounts;
  if (text.empty()) return "expected SRC[:DST[:ro|rw]],...";
  std::stringstream in(text);
  for (std::string entry; std::getline(in, entry, ',');) {
    if (mounts.size() == kMaxContainerMounts)
      return "more than " + std::to_string(kMaxContainerMounts) + " mounts";
    std::vector<std::string> f;
    std::stringstream fields(entry);
    for (std::string x; std::getline(fields, x, ':');) f.push_back(x);
    if (!entry.empty() && entry.back() == ':') f.push_back("");
    if (f.empty() || f.size() > 3) return "mount " + Quoted(entry) + " is not SRC[:DST[:ro|rw]]";
    ContainerMountSpec m;
    m.source = f[0];
    m.target = f.size() >= 2 ? f[1] : f[0];
    if (f.size() == 3) {
      if (f[2] != "ro" && f[2] != "rw") return "mount " + Quoted(entry) + ": mode must be ro or rw (got " + Quoted(f[2]) + ")";
      m.read_only = f[2] == "ro";
    }
    if (std::string err = CheckContainerMount(m, mounts); !err.empty()) return err;
    mounts.push_back(std::move(m));
  }
  if (text.back() == ',') return "mount list " + Quoted(text) + " ends with ','";
  *out = std::move(mounts);
  return "";
}

std::string CheckEnvName(const std::string& name) {
  if (name.empty()) return "empty environment variable name";
  if (name.size() > kMaxEnvNameBytes)
    return "environment variable name has " + std::to_string(name.size()) + " bytes; the limit is " +
           std::to_string(kMaxEnvNameBytes);
  if (std::isdigit(static_cast<unsigned char>(name[0])) || !std::all_of(name.begin(), name.end(), IsWordChar))
    return "environment variable name " + Quoted(name) + " must be [A-Za-z_][A-Za-z0-9_]*";
  return "";
}

std::string ParseContainerEnvNames(const std::string& text, std::vector<std::string>* out) {
  std::vector<std::string> names;
  std::stringstream in(text);
  for (std::string n; std::getline(in, n, ',');) {
    if (std::string err = CheckEnvName(n); !err.empty()) return err;
    if (std::find(names.begin(), names.end(), n) != names.end()) continue;
    if (names.size() == kMaxContainerEnvNames) return "more than " + std::to_string(kMaxContainerEnvNames) + " names";
    names.push_back(std::move(n));
  }
  if (names.empty() || text.back() == ',') return "expected NAME,NAME,... (got " + Quoted(text) + ")";
  *out = std::move(names);
  return "";
}

}  // namespace mlsched
