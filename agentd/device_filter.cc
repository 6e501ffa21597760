#include "agentd/device_filter.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace mlsched::agent {
namespace {

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst;
  i.src_reg = src;
  i.off = off;
  i.imm = imm;
  return i;
}

// The program, on struct bpf_cgroup_dev_ctx {u32 access_type; u32 major; u32 minor;} in r1:
//   r2 = access_type & 0xffff (BPF_DEVCG_DEV_CHAR / _BLOCK), r3 = major, r4 = minor
//   for each denied device: if (r2 == type && r3 == major && r4 == minor) goto deny
//   return 1 (allow);  deny: return 0
std::vector<bpf_insn> DenyProgram(const std::vector<DeviceId>& denied) {
  std::vector<bpf_insn> p{
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_2, BPF_REG_1, 0, 0),
      Insn(BPF_ALU | BPF_AND | BPF_K, BPF_REG_2, 0, 0, 0xffff),
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_3, BPF_REG_1, 4, 0),
      Insn(BPF_LDX | BPF_W | BPF_MEM, BPF_REG_4, BPF_REG_1, 8, 0),
  };
  const size_t deny_at = p.size() + 4 * denied.size() + 2;
  for (const auto& d : denied) {
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_2, 0, 3, d.block ? BPF_DEVCG_DEV_BLOCK : BPF_DEVCG_DEV_CHAR));
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_3, 0, 2, static_cast<int32_t>(d.major)));
    p.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, BPF_REG_4, 0, 1, static_cast<int32_t>(d.minor)));
    p.push_back(Insn(BPF_JMP | BPF_JA, 0, 0, static_cast<int16_t>(deny_at - (p.size() + 1)), 0));
  }
  p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 1));
  p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  if (denied.empty()) return p;  // the verifier refuses unreachable instructions
  p.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, 0));
  p.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return p;
}

int LoadProgram(const std::vector<bpf_insn>& insns) {
  static const char kLicense[] = "GPL";
  union bpf_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  attr.insns = reinterpret_cast<uint64_t>(insns.data());
  attr.insn_cnt = static_cast<uint32_t>(insns.size());
  attr.license = reinterpret_cast<uint64_t>(kLicense);
  return static_cast<int>(syscall(SYS_bpf, BPF_PROG_LOAD, &attr, sizeof attr));
}

}  // namespace

bool DeviceOf(const std::string& path, DeviceId* out) {
  struct stat st{};
  if (stat(path.c_str(), &st) != 0 || !(S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode))) return false;
  *out = DeviceId{S_ISBLK(st.st_mode), major(st.st_rdev), minor(st.st_rdev)};
  return true;
}

bool CanFilterDevices() {
  int fd = LoadProgram(DenyProgram({}));
  if (fd < 0) return false;
  close(fd);
  return true;
}

std::string AttachDeviceDenyProgram(const std::string& cgroup_dir, const std::vector<DeviceId>& denied) {
  int prog = LoadProgram(DenyProgram(denied));
  if (prog < 0) return std::string("bpf(BPF_PROG_LOAD) of a device program: ") + std::strerror(errno);
  int cg = open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg < 0) {
    int err = errno;
    close(prog);
    return "open " + cgroup_dir + ": " + std::strerror(err);
  }
  union bpf_attr attr;
  std::memset(&attr, 0, sizeof attr);
  attr.target_fd = static_cast<uint32_t>(cg);
  attr.attach_bpf_fd = static_cast<uint32_t>(prog);
  attr.attach_type = BPF_CGROUP_DEVICE;
  attr.attach_flags = BPF_F_ALLOW_MULTI;
  int rc = static_cast<int>(syscall(SYS_bpf, BPF_PROG_ATTACH, &attr, sizeof attr));
  int err = errno;
  close(cg);
  close(prog);  // the attachment keeps the program
  if (rc != 0) return "bpf(BPF_PROG_ATTACH) of a device program to " + cgroup_dir + ": " + std::strerror(err);
  return "";
}

}  // namespace mlsched::agent
