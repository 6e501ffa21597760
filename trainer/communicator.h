// Collective communication between the ranks of one job, and the env-based rendezvous.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trainer/kv_store.h"

namespace mltrain {

/// Shortest MLSCHED_RENDEZVOUS_TOKEN mltrain accepts (bytes); agentd's are 64 hex digits.
inline constexpr size_t kMinRendezvousTokenBytes = 16;

/// The torchrun/agentd rendezvous contract, read from the environment.
struct RendezvousEnv {
  int rank = 0;             ///< RANK
  int world_size = 1;       ///< WORLD_SIZE
  int local_rank = 0;       ///< LOCAL_RANK
  std::string master_addr;  ///< MASTER_ADDR (rank 0's host, serving the key-value store)
  int master_port = 0;      ///< MASTER_PORT
  /// MLSCHED_RENDEZVOUS_FD: on rank 0 under agentd, a TCP socket the agent bound to
  /// MASTER_ADDR:MASTER_PORT (not listening) for the store to listen on at once; -1 when unset.
  int rendezvous_fd = -1;
  std::string job_id;       ///< MLSCHED_JOB_ID (scopes store keys; "standalone" when unset)
  std::string attempt;      ///< MLSCHED_ATTEMPT (scopes store keys; "0" when unset)
  /// MLSCHED_RENDEZVOUS_TOKEN: the attempt's secret, required by the store on every connection.
  /// Empty only for a single rank or with MLTRAIN_INSECURE_RENDEZVOUS=1. Never log it.
  std::string token;

  /// Store key prefix: a process of another job or a stale attempt cannot join this one.
  std::string KeyScope() const { return "mlsched/" + job_id + "/" + attempt + "/"; }
};

/// Reads RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT, MLSCHED_JOB_ID, MLSCHED_ATTEMPT,
/// MLSCHED_RENDEZVOUS_TOKEN, MLSCHED_RENDEZVOUS_FD (a descriptor number >= 3). Missing WORLD_SIZE
/// means a single rank. Throws std::invalid_argument naming the variable when a value is malformed
/// or out of range, or when, for world > 1,
/// MASTER_ADDR/MASTER_PORT are missing or the token is missing (unless MLTRAIN_INSECURE_RENDEZVOUS=1)
/// or not kMinRendezvousTokenBytes..kKvMaxTokenBytes long. Error messages never contain the token.
RendezvousEnv ReadRendezvousEnv();

/// Rank 0: starts the job's rendezvous store on MASTER_ADDR:MASTER_PORT: on the socket agentd
/// reserved (env.rendezvous_fd, listened on at once), else bound to the addresses MASTER_ADDR
/// resolves to; it requires env.token on every connection and admits 4 connections per rank plus
/// 64, at most kKvMaxConnections. Other ranks: nullptr. Throws RendezvousPortTakenError when
/// another process listens on the port (main() exits 75: requeue), std::runtime_error when it
/// cannot listen for another reason.
std::unique_ptr<KvServer> StartRendezvousStore(const RendezvousEnv& env);

/// A client of the job's store (on rank 0, of `server`'s actual port) presenting env.token.
KvClient ConnectRendezvousStore(const RendezvousEnv& env, const KvServer* server, std::chrono::milliseconds timeout);

/// Collectives over the ranks of one job. Every call is collective (all ranks must call it in the
/// same order with the same sizes). Every wait has a deadline: a peer that dies or does not answer
/// within the timeout makes the call throw PeerLostError.
/// Element ranges for reduce-scatter/all-gather follow BlockRange(count, rank, world_size).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Backend name for logs: "single", "gloo-ring", "gloo-halving-doubling".
  virtual std::string backend() const = 0;

  /// In place: data becomes the element-wise sum over ranks.
  virtual void AllReduceSum(std::span<float> data) = 0;
  /// In place: this rank's block of data, BlockRange(data.size(), rank(), world_size()), becomes the
  /// element-wise sum of that block over ranks; other blocks are left unspecified. Any length (the
  /// same on every rank), including 0 and lengths below the world size (then some blocks are empty).
  virtual void ReduceScatterSum(std::span<float> data) = 0;
  /// In place: each rank contributes its block of data; afterwards every block is filled on all ranks.
  virtual void AllGather(std::span<float> data) = 0;
  /// Gathers one 64-bit word from every rank, indexed by rank.
  virtual std::vector<uint64_t> AllGatherWord(uint64_t word) = 0;
  /// Copies `root`'s bytes into every rank's buffer (same size on all ranks).
  virtual void Broadcast(std::span<uint8_t> bytes, int root) = 0;
  virtual void Barrier() = 0;
  /// Closes all connections so that peers blocked in a collective fail quickly. Idempotent.
  virtual void Abort() noexcept = 0;
};

/// World size 1: every collective is a local no-op.
class SingleRankCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  std::string backend() const override { return "single"; }
  void AllReduceSum(std::span<float>) override {}
  void ReduceScatterSum(std::span<float>) override {}
  void AllGather(std::span<float>) override {}
  std::vector<uint64_t> AllGatherWord(uint64_t word) override { return {word}; }
  void Broadcast(std::span<uint8_t>, int) override {}
  void Barrier() override {}
  void Abort() noexcept override {}
};

/// Options for CreateCommunicator.
struct CommunicatorOptions {
  std::chrono::milliseconds rendezvous_timeout{60000};  ///< waiting for all ranks to arrive
  std::chrono::milliseconds collective_timeout{60000};  ///< one collective, end to end
  std::string allreduce_algorithm = "ring";             ///< "ring" or "halving-doubling"
  bool shm_allreduce = true;  ///< all-reduce through shared memory when every rank shares one host
  bool sync_io = true;  ///< Gloo: collectives do their socket I/O on the calling thread (no loop-thread hand-off)
};

/// Single rank when world_size == 1; otherwise Gloo over TCP, rendezvous through the key-value
/// store that rank 0 serves on MASTER_PORT. Throws PeerLostError when peers do not arrive in time.
std::unique_ptr<Communicator> CreateCommunicator(const RendezvousEnv& env, const CommunicatorOptions& options);

}  // namespace mltrain
