// Fuzz target: CDI spec files (agentd/cdi_spec.h), which root-run agentd reads from /etc/cdi and
// /var/run/cdi through libyaml (YAML) or nlohmann (JSON). The first byte picks the format (odd:
// JSON), the rest is the file. Properties: no crash, UB or exception (alias bombs and deep
// nesting end in an error); an accepted spec has a VENDOR/CLASS kind, named devices, absolute
// paths and NAME=VALUE variables, every list and string within its limit.
#include "agentd/cdi_spec.h"
#include "fuzz/fuzz_util.h"

namespace {

void CheckEdits(const mlsched::agent::CdiEdits& e) {
  using namespace mlsched::agent;
  FUZZ_CHECK(e.env.size() <= kMaxCdiListEntries && e.device_nodes.size() <= kMaxCdiListEntries);
  FUZZ_CHECK(e.mounts.size() <= kMaxCdiListEntries && e.hooks.size() <= kMaxCdiListEntries);
  for (const auto& kv : e.env) FUZZ_CHECK(kv.find('=') != std::string::npos && kv[0] != '=' && kv.size() <= kMaxCdiStringBytes);
  for (const auto& n : e.device_nodes) FUZZ_CHECK(!n.path.empty() && n.path[0] == '/' && (n.host_path.empty() || n.host_path[0] == '/'));
  for (const auto& m : e.mounts) FUZZ_CHECK(m.host_path[0] == '/' && m.container_path[0] == '/');
  for (const auto& h : e.hooks) FUZZ_CHECK(h.path[0] == '/' && !h.hook_name.empty() && h.args.size() <= kMaxCdiListEntries);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string file = (data[0] & 1) ? "/etc/cdi/fuzz.json" : "/etc/cdi/fuzz.yaml";
  const std::string text = mlsched::fuzz::Text(data + 1, size - 1);
  auto spec = mlsched::agent::ParseCdiSpec(text, file);
  if (!spec) {
    FUZZ_CHECK(!spec.error.empty());
    return 0;
  }
  const auto slash = spec.value->kind.find('/');
  FUZZ_CHECK(slash != std::string::npos && slash > 0 && slash + 1 < spec.value->kind.size());
  FUZZ_CHECK(spec.value->devices.size() <= mlsched::agent::kMaxCdiListEntries);
  CheckEdits(spec.value->edits);
  for (const auto& d : spec.value->devices) {
    FUZZ_CHECK(!d.name.empty());
    CheckEdits(d.edits);
  }
  return 0;
}
