// Leader election of schedd replicas on etcd (HA mode), after Kubernetes' leader election: each
// replica holds an etcd lease (TTL a few seconds, renewed every TTL/3) and its member key; the
// leader is the replica whose transaction created PREFIX/leader (bound to its lease), and its
// epoch is the revision of that creation. Every durable write is fenced on that epoch, the key's
// lease and its value (EtcdStore), so a replica that lost the lease without noticing, or whose key
// was rewritten in place, cannot change anything. A leader key that no replica could have written
// (no lease, or no address in it) is deleted by whichever replica finds it.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mlsched/v1/stored.pb.h"
#include "schedd/server/etcd_client.h"

namespace mlsched::server {

/// Settings of HA mode.
struct LeaderConfig {
  std::string prefix = "/mlsched/";  // etcd key prefix of this cluster's state
  std::string address;               // this replica's client address (HOST:PORT), told to clients
  int lease_ttl_s = 5;               // seconds a silent leader keeps its lease
  std::chrono::milliseconds poll{100};  // how often a follower looks at the leader key
};

class Leadership {
 public:
  Leadership(EtcdClient& etcd, LeaderConfig config);
  /// Stops the election thread (without resigning: the lease then expires by itself).
  ~Leadership();
  Leadership(const Leadership&) = delete;
  Leadership& operator=(const Leadership&) = delete;

  /// Starts campaigning. `on_elected(epoch)` runs once, on its own thread, when this replica wins;
  /// `on_lost(why)` runs once when it led and can no longer be sure it does (its lease expired or
  /// was not renewed within its TTL, or the leader key changed). Neither runs after Stop/Resign.
  void Start(std::function<void(int64_t epoch)> on_elected, std::function<void(const std::string&)> on_lost);
  /// Graceful handover: stops campaigning and revokes this replica's lease, which deletes the
  /// leader key at once, so a follower wins within its poll interval. Safe on a follower.
  void Resign();

  /// What this replica knows now.
  struct View {
    std::string leader;     // the leader's client address ("" while none is known)
    int64_t epoch = 0;      // the leader's epoch
    bool is_leader = false;  // this replica leads
    int64_t revision = 0;   // the newest etcd revision this replica saw
    int64_t lease = 0;      // the lease the leader key is bound to (this replica leads)
  };
  View Current() const;
  /// Every replica's member key (address, role, observed revision). Throws EtcdError.
  std::vector<v1::StoredMember> Members();
  /// The exact value this replica writes to the leader key (the store fences on it).
  std::string KeyValue() const;
  /// Leader keys deleted because no replica could have written them (no lease, no address).
  int64_t ForeignLeaderKeys() const { return foreign_leader_keys_.load(); }

 private:
  void Loop();
  /// One round: renew the lease when due, campaign or watch the leader key, refresh the member key.
  void Round(std::chrono::steady_clock::time_point now);
  void Campaign();
  /// Deletes the leader key if it is still at `mod_revision` (logged and counted with `why`).
  void RemoveForeignLeaderKey(int64_t mod_revision, const std::string& why);
  void Lost(const std::string& why);

  EtcdClient& etcd_;
  LeaderConfig cfg_;
  std::function<void(int64_t)> on_elected_;
  std::function<void(const std::string&)> on_lost_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  View view_;
  int64_t lease_ = 0;
  std::chrono::steady_clock::time_point renewed_{}, member_written_{};
  bool lost_ = false;
  std::atomic<int64_t> foreign_leader_keys_{0};
  std::thread thread_, elected_thread_;
};

}  // namespace mlsched::server

#include "mlsched/v1/admin.pb.h"

namespace mlsched::server {

/// AdminService.HaStatus as this replica sees it: leader, epoch, members with their lag in
/// revisions, the etcd endpoints and this replica's refused (fenced) writes. Members are read
/// from etcd; when etcd does not answer, the list is empty and the rest is this replica's view.
v1::HaStatusResponse BuildHaStatus(Leadership& leadership, const EtcdClient& etcd, const std::string& self,
                                   int64_t fenced_writes);

}  // namespace mlsched::server
