#include "schedd/server/leader.h"

#include <spdlog/spdlog.h>

#include "schedd/server/etcd_store.h"

namespace mlsched::server {

Leadership::Leadership(EtcdClient& etcd, LeaderConfig config) : etcd_(etcd), cfg_(std::move(config)) {}

Leadership::~Leadership() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (elected_thread_.joinable()) elected_thread_.join();
}

void Leadership::Start(std::function<void(int64_t)> on_elected, std::function<void(const std::string&)> on_lost) {
  on_elected_ = std::move(on_elected);
  on_lost_ = std::move(on_lost);
  thread_ = std::thread([this] { Loop(); });
}

Leadership::View Leadership::Current() const {
  std::lock_guard lk(mu_);
  return view_;
}

std::vector<v1::StoredMember> Leadership::Members() {
  std::vector<v1::StoredMember> out;
  for (const auto& kv : etcd_.RangePrefix(cfg_.prefix + "members/")) {
    v1::StoredMember m;
    if (m.ParseFromString(kv.value())) out.push_back(std::move(m));
  }
  return out;
}

void Leadership::Resign() {
  int64_t lease;
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    lease = lease_;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (lease == 0) return;
  try {
    etcd_.LeaseRevoke(lease);
    spdlog::info("HA: resigned (lease {:x} revoked)", lease);
  } catch (const std::exception& e) {
    spdlog::warn("HA: resigning: {} (the lease expires by itself)", e.what());
  }
}

void Leadership::Lost(const std::string& why) {
  {
    std::lock_guard lk(mu_);
    if (lost_ || stop_) return;
    lost_ = true;
    view_.is_leader = false;
  }
  spdlog::error("HA: lost leadership: {}", why);
  if (on_lost_) on_lost_(why);
}

void Leadership::Loop() {
  for (;;) {
    {
      std::unique_lock lk(mu_);
      if (stop_) return;
    }
    try {
      Round(std::chrono::steady_clock::now());
    } catch (const std::exception& e) {
      spdlog::warn("HA: {}", e.what());
    }
    std::unique_lock lk(mu_);
    // A leader whose lease could have expired must stop believing it leads.
    if (view_.is_leader && std::chrono::steady_clock::now() - renewed_ > std::chrono::seconds(cfg_.lease_ttl_s)) {
      lk.unlock();
      Lost("the lease was not renewed for " + std::to_string(cfg_.lease_ttl_s) + " s");
      lk.lock();
    }
    cv_.wait_for(lk, cfg_.poll, [&] { return stop_; });
    if (stop_) return;
  }
}

void Leadership::Round(std::chrono::steady_clock::time_point now) {
  const auto renew_every = std::chrono::milliseconds(cfg_.lease_ttl_s * 1000 / 3);
  if (lease_ == 0) {
    const int64_t lease = etcd_.LeaseGrant(cfg_.lease_ttl_s);
    std::lock_guard lk(mu_);
    lease_ = lease;
    renewed_ = now;
  } else if (now - renewed_ >= renew_every) {
    const int64_t ttl = etcd_.LeaseKeepAlive(lease_);
    if (ttl <= 0) {
      bool was_leader;
      {
        std::lock_guard lk(mu_);
        was_leader = view_.is_leader;
        lease_ = 0;
      }
      if (was_leader) Lost("the lease expired");
      return;
    }
    std::lock_guard lk(mu_);
    renewed_ = now;
  }
  Campaign();
  if (now - member_written_ >= std::chrono::seconds(1)) {
    View v = Current();
    v1::StoredMember m;
    m.set_address(cfg_.address);
    m.set_role(v.is_leader ? "leader" : "follower");
    m.set_revision(v.revision);
    etcdpb::TxnRequest txn;
    auto* put = txn.add_success()->mutable_request_put();
    put->set_key(cfg_.prefix + "members/" + cfg_.address);
    put->set_value(m.SerializeAsString());
    put->set_lease(lease_);
    etcd_.Txn(txn);
    member_written_ = now;
  }
}

std::string Leadership::KeyValue() const {
  v1::StoredMember me;
  me.set_address(cfg_.address);
  me.set_role("leader");
  return me.SerializeAsString();
}

void Leadership::Campaign() {
  const std::string key = LeaderKey(cfg_.prefix);
  const std::string mine = KeyValue();
  etcdpb::TxnRequest txn;
  auto* cmp = txn.add_compare();
  cmp->set_key(key);
  cmp->set_target(etcdpb::Compare::CREATE);
  cmp->set_result(etcdpb::Compare::EQUAL);
  cmp->set_create_revision(0);  // the key does not exist
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(mine);
  put->set_lease(lease_);
  txn.add_failure()->mutable_request_range()->set_key(key);
  auto resp = etcd_.Txn(txn);
  std::unique_lock lk(mu_);
  view_.revision = std::max(view_.revision, resp.header().revision());
  int64_t won_epoch = 0;
  if (resp.succeeded()) {
    won_epoch = resp.header().revision();
  } else if (resp.responses_size() == 1 && resp.responses(0).response_range().kvs_size() == 1) {
    const auto& kv = resp.responses(0).response_range().kvs(0);
    v1::StoredMember leader;
    const bool parsed = leader.ParseFromString(kv.value()) && !leader.address().empty();
    if (view_.is_leader) {
      // The key must still be exactly the one this replica wrote: same creation, same lease, same
      // value. A key rewritten in place (a put keeps the create revision) is not ours any more.
      std::string why;
      if (kv.create_revision() != view_.epoch) why = "was created again at revision " + std::to_string(kv.create_revision());
      else if (kv.lease() != lease_) why = "now has lease " + std::to_string(kv.lease()) + ", not this replica's";
      else if (kv.value() != mine) why = "was rewritten (it names " + (parsed ? leader.address() : std::string("nobody")) + ")";
      if (!why.empty()) {
        lk.unlock();
        Lost("the leader key " + why);
        return;
      }
    }
    if (kv.lease() == 0 || !parsed) {
      // A leader key no replica wrote (every campaign binds it to a lease and names an address):
      // made by hand or by an intruder, it would stop every election until deleted. Delete it,
      // unless it changed since it was read.
      lk.unlock();
      RemoveForeignLeaderKey(kv.mod_revision(), kv.lease() == 0 ? "has no lease" : "names no replica");
      return;
    }
    view_.leader = leader.address();
    view_.epoch = kv.create_revision();
    // Our own earlier campaign won, but its answer was lost.
    if (!view_.is_leader && !lost_ && kv.lease() == lease_ && kv.value() == mine) won_epoch = kv.create_revision();
  } else if (view_.is_leader) {
    lk.unlock();
    Lost("the leader key is gone");
    return;
  } else {
    view_.leader.clear();
    view_.epoch = 0;
  }
  if (won_epoch == 0 || view_.is_leader || lost_) return;
  view_.is_leader = true;
  view_.leader = cfg_.address;
  view_.epoch = won_epoch;
  view_.lease = lease_;
  spdlog::info("HA: elected leader at epoch {} (lease {:x})", won_epoch, lease_);
  elected_thread_ = std::thread([this, won_epoch] { on_elected_(won_epoch); });
}

void Leadership::RemoveForeignLeaderKey(int64_t mod_revision, const std::string& why) {
  const std::string key = LeaderKey(cfg_.prefix);
  etcdpb::TxnRequest txn;
  auto* cmp = txn.add_compare();
  cmp->set_key(key);
  cmp->set_target(etcdpb::Compare::MOD);
  cmp->set_result(etcdpb::Compare::EQUAL);
  cmp->set_mod_revision(mod_revision);
  txn.add_success()->mutable_request_delete_range()->set_key(key);
  if (etcd_.Txn(txn).succeeded()) {
    foreign_leader_keys_.fetch_add(1);
    spdlog::error("HA: the leader key {} {}: no replica wrote it (by hand, or an intruder with write access to "
                  "etcd); deleted it so that the election goes on",
                  key, why);
  }
}

}  // namespace mlsched::server

namespace mlsched::server {

v1::HaStatusResponse BuildHaStatus(Leadership& leadership, const EtcdClient& etcd, const std::string& self,
                                   int64_t fenced_writes) {
  v1::HaStatusResponse r;
  const auto view = leadership.Current();
  r.set_mode("etcd");
  r.set_leader(view.leader);
  r.set_epoch(view.epoch);
  r.set_answered_by(self);
  r.set_revision(view.revision);
  r.set_fenced_writes(fenced_writes);
  for (const auto& ep : etcd.Endpoints()) r.add_etcd_endpoints(ep);
  try {
    for (const auto& m : leadership.Members()) {
      auto* out = r.add_members();
      out->set_address(m.address());
      out->set_role(m.address() == view.leader ? "leader" : "follower");
      out->set_revision(m.revision());
      out->set_lag(std::max<int64_t>(0, view.revision - m.revision()));
    }
  } catch (const std::exception& e) {
    spdlog::warn("HaStatus: cannot list members: {}", e.what());
  }
  return r;
}

}  // namespace mlsched::server
