// nfq_delay QUEUE DELAY_MS: holds every packet that iptables sends to NFQUEUE number QUEUE for
// DELAY_MS milliseconds, then lets it go (NF_ACCEPT), in arrival order. The multi-host tests use it
// for partition case (d)'s delay, on kernels without sch_netem (tests/e2e/hosts_lib.sh, link_loss);
// the queue is opened fail-open, so a full queue lets packets through instead of dropping them.
// Runs until SIGTERM or SIGINT. Uses libnetfilter_queue (Debian: libnetfilter-queue-dev).
#include <arpa/inet.h>
#include <linux/netfilter.h>
#include <poll.h>
#include <sys/socket.h>

#include <libnetfilter_queue/libnetfilter_queue.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <string>

namespace {

using Clock = std::chrono::steady_clock;

/// A queued packet: its NFQUEUE id and when it may go.
struct Held {
  uint32_t id;
  Clock::time_point due;
};

struct State {
  std::chrono::milliseconds delay{0};
  std::deque<Held> held;  // in arrival order, hence in due order (one delay for all)
  uint64_t packets = 0;
};

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int OnPacket(nfq_q_handle* /*qh*/, nfgenmsg* /*msg*/, nfq_data* nfa, void* data) {
  auto* st = static_cast<State*>(data);
  const nfqnl_msg_packet_hdr* ph = nfq_get_msg_packet_hdr(nfa);
  if (ph == nullptr) return 0;
  st->held.push_back(Held{ntohl(ph->packet_id), Clock::now() + st->delay});
  st->packets += 1;
  return 0;
}

/// Parses a non-negative integer no larger than `max`; exits with a usage error otherwise.
long ParseArg(const char* text, long max, const char* what) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < 0 || v > max) {
    std::fprintf(stderr, "nfq_delay: %s '%s' is not an integer in 0..%ld\n", what, text, max);
    std::exit(2);
  }
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: nfq_delay QUEUE DELAY_MS\n");
    return 2;
  }
  const auto queue = static_cast<uint16_t>(ParseArg(argv[1], 65535, "queue number"));
  State st;
  st.delay = std::chrono::milliseconds(ParseArg(argv[2], 60000, "delay (ms)"));
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);

  nfq_handle* h = nfq_open();
  if (h == nullptr) {
    std::perror("nfq_delay: nfq_open");
    return 1;
  }
  nfq_q_handle* qh = nfq_create_queue(h, queue, &OnPacket, &st);
  if (qh == nullptr) {
    std::perror("nfq_delay: nfq_create_queue (is another program bound to this queue?)");
    return 1;
  }
  // Only the packet's id is needed: no payload is copied to user space.
  if (nfq_set_mode(qh, NFQNL_COPY_META, 0) < 0 || nfq_set_queue_maxlen(qh, 65536) < 0 ||
      nfq_set_queue_flags(qh, NFQA_CFG_F_FAIL_OPEN, NFQA_CFG_F_FAIL_OPEN) < 0) {
    std::perror("nfq_delay: configuring the queue");
    return 1;
  }
  const int fd = nfq_fd(h);
  int rcvbuf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof rcvbuf);
  std::fprintf(stderr, "nfq_delay: queue %u, holding each packet %lld ms\n", queue,
               static_cast<long long>(st.delay.count()));

  alignas(8) char buf[65536];
  uint64_t lost_messages = 0;
  while (!g_stop) {
    int timeout_ms = 100;
    if (!st.held.empty()) {
      const auto wait = std::chrono::ceil<std::chrono::milliseconds>(st.held.front().due - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<int64_t>(wait.count(), 0, 100));
    }
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) > 0) {
      for (;;) {
        const ssize_t n = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) {
          nfq_handle_packet(h, buf, static_cast<int>(n));
          continue;
        }
        if (n < 0 && errno == ENOBUFS) {  // the kernel dropped messages: those packets fail open later
          lost_messages += 1;
          continue;
        }
        break;
      }
    }
    const auto now = Clock::now();
    while (!st.held.empty() && st.held.front().due <= now) {
      nfq_set_verdict(qh, st.held.front().id, NF_ACCEPT, 0, nullptr);
      st.held.pop_front();
    }
  }
  for (const Held& p : st.held) nfq_set_verdict(qh, p.id, NF_ACCEPT, 0, nullptr);  // nothing held back
  std::fprintf(stderr, "nfq_delay: %llu packets delayed, %llu netlink overruns\n",
               static_cast<unsigned long long>(st.packets), static_cast<unsigned long long>(lost_messages));
  nfq_destroy_queue(qh);
  nfq_close(h);
  return 0;
}
