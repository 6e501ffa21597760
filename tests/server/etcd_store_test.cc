// HA mode against a real etcd (Debian's etcd-server, started on loopback per test): the store's
// rows, submission keys, the fence, and the election.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ctime>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "schedd/server/etcd_archive.h"
#include "schedd/server/etcd_store.h"
#include "schedd/server/leader.h"
#include "tests/server/fixtures.h"

using namespace mlsched::server;
using mlsched::server::testing::TempDir;

namespace {

int FreePort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

/// One etcd member on loopback in a temporary directory, killed at the end.
struct EtcdProcess {
  TempDir dir;
  int client_port = FreePort(), peer_port = FreePort();
  pid_t pid = -1;
  std::string endpoint = "127.0.0.1:" + std::to_string(client_port);
  EtcdProcess() {
    const std::string client = "http://" + endpoint, peer = "http://127.0.0.1:" + std::to_string(peer_port);
    const std::string data = (dir.path / "data").string(), log = (dir.path / "etcd.log").string();
    pid = ::fork();
    if (pid == 0) {
      FILE* f = std::freopen(log.c_str(), "w", stderr);
      (void)f;
      ::execlp("etcd", "etcd", "--name", "t", "--data-dir", data.c_str(), "--listen-client-urls", client.c_str(),
               "--advertise-client-urls", client.c_str(), "--listen-peer-urls", peer.c_str(),
               "--initial-advertise-peer-urls", peer.c_str(), "--initial-cluster", ("t=" + peer).c_str(), nullptr);
      _exit(127);
    }
    EtcdClient probe({endpoint}, std::chrono::milliseconds(500));
    for (int i = 0; i < 100; ++i) {
      try {
        etcdpb::RangeRequest r;
        r.set_key("probe");
        probe.Range(r);
        return;
      } catch (const EtcdError&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    FAIL("etcd did not start on " << endpoint << " (is etcd-server installed? scripts/install-deps.sh)");
  }
  ~EtcdProcess() {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
};

/// Makes `prefix`'s leader key exist at a revision and returns it (the epoch), as Leadership does.
int64_t TakeLeaderKey(EtcdClient& etcd, const std::string& prefix) {
  etcdpb::TxnRequest del;  // the previous leader's key is gone (its lease expired)
  del.add_success()->mutable_request_delete_range()->set_key(LeaderKey(prefix));
  etcd.Txn(del);
  etcdpb::TxnRequest txn;
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(LeaderKey(prefix));
  put->set_value("test");
  return etcd.Txn(txn).header().revision();
}

JobRow Row(const std::string& user, const std::string& key = "") {
  JobRow r;
  r.spec = "spec-of-" + user;
  r.user = user;
  r.uid = 1000;
  r.submit_time = 100;
  r.submission_key = key;
  return r;
}

}  // namespace

TEST_CASE("etcd store: rows survive a new leader and submission keys are idempotent", "[etcd]") {
  EtcdProcess etcd_proc;
  EtcdClient etcd({etcd_proc.endpoint}, std::chrono::milliseconds(2000));
  int64_t a = 0, b = 0;
  {
    EtcdStore s(etcd, "/t/");
    CHECK_THROWS_AS(s.InsertJob(Row("alice")).get(), StoreError);  // not the leader yet
    s.BecomeLeader(TakeLeaderKey(etcd, "/t/"));
    a = s.InsertJob(Row("alice", "k1")).get().id;
    auto again = s.InsertJob(Row("alice", "k1")).get();  // a retry with the same key
    CHECK(again.existed);
    CHECK(again.id == a);
    b = s.InsertJobArray(Row("bob"), 3, [](int64_t first, size_t i) { return "el" + std::to_string(first + i); })
            .get()
            .id;
    CHECK(b == a + 2);  // the retry took an id it did not use (its nested transaction found the key)
    JobRow upd = *s.LoadJob(a);
    upd.state = "COMPLETED";
    upd.end_time = 500;
    s.UpdateJob(upd, "end", "exit 0").get();
    AttemptRow at;
    at.job_id = a;
    at.attempt = 1;
    at.start_time = 200;
    at.end_time = 500;
    at.outcome = "COMPLETED";
    s.SaveAttempt(at).get();
    s.SaveUsage({{"root/a", 12.5}}, 777).get();
    s.SaveRuntimes("alice", {10, 20}).get();
    s.SaveRuntimes("alice:1x1000m,0B|60s", {5}).get();
    s.SaveRuntimes("alice:1x1000m,0B|60s", {}).get();  // no runs: deleted (a dropped template)
    CHECK(s.LoadProvisionLedger().empty());
    s.SaveProvisionLedger("ledger-1").get();
    s.SaveProvisionLedger("ledger-2").get();
    CHECK_THROWS(s.SaveProvisionLedger(std::string(kMaxProvisionLedgerBytes + 1, 'x')).get());
    CHECK(s.LoadPredictorModel().empty());
    s.SavePredictorModel("model-1").get();
    CHECK_THROWS(s.SavePredictorModel(std::string(kMaxPredictorModelBytes + 1, 'x')).get());
    s.SaveNode(NodeRow{"n1", "info", true, "maintenance"}).get();
  }
  // A new leader (another replica) sees everything and continues the ids.
  EtcdStore s(etcd, "/t/");
  s.BecomeLeader(TakeLeaderKey(etcd, "/t/"));
  auto jobs = s.LoadJobs(0);
  REQUIRE(jobs.size() == 4);
  CHECK(jobs[0].id == a);
  CHECK(jobs[0].state == "COMPLETED");
  CHECK(jobs[0].spec == "spec-of-alice");
  CHECK(jobs[2].spec == "el" + std::to_string(b + 1));
  CHECK(s.LoadJobs(600).size() == 3);  // the finished one is older than 600
  CHECK(s.LookupSubmission("alice", 1000, "k1") == a);
  CHECK_FALSE(s.LookupSubmission("alice", 1001, "k1"));
  CHECK(s.InsertJob(Row("alice", "k1")).get().id == a);
  CHECK(s.InsertJob(Row("carol")).get().id == b + 4);
  CHECK(s.LoadAttempts(0, 1000).size() == 1);
  CHECK(s.LoadFinishedJobs(0, 1000).size() == 1);
  std::map<std::string, double> usage;
  CHECK(s.LoadUsage(&usage) == 777);
  CHECK(usage["root/a"] == 12.5);
  CHECK(s.LoadRuntimes() == std::vector<std::pair<std::string, std::vector<int64_t>>>{{"alice", {10, 20}}});
  CHECK(s.LoadProvisionLedger() == "ledger-2");
  CHECK(s.LoadPredictorModel() == "model-1");
  auto nodes = s.LoadNodes();
  REQUIRE(nodes.size() == 1);
  CHECK(nodes[0].drained);
  CHECK(s.LoadSpec(b) == "el" + std::to_string(b));
}

TEST_CASE("etcd store: a deposed leader's writes are refused by the fence and counted", "[etcd]") {
  EtcdProcess etcd_proc;
  EtcdClient etcd({etcd_proc.endpoint}, std::chrono::milliseconds(2000));
  EtcdStore old_leader(etcd, "/t/");
  int fenced_calls = 0;
  old_leader.SetOnFenced([&] { ++fenced_calls; });
  old_leader.BecomeLeader(TakeLeaderKey(etcd, "/t/"));
  const int64_t kept = old_leader.InsertJob(Row("alice")).get().id;
  // Another replica wins: the leader key is created again, at a newer revision.
  EtcdStore new_leader(etcd, "/t/");
  new_leader.BecomeLeader(TakeLeaderKey(etcd, "/t/"));
  CHECK_THROWS_WITH(old_leader.InsertJob(Row("mallory")).get(), Catch::Contains("fenced"));
  JobRow late = *old_leader.LoadJob(kept);
  late.state = "CANCELLED";
  CHECK_THROWS_WITH(old_leader.UpdateJob(late, "cancel").get(), Catch::Contains("fenced"));
  CHECK(old_leader.FencedWrites() == 2);
  CHECK(fenced_calls == 1);
  // Nothing of the old leader's late writes reached etcd.
  auto jobs = new_leader.LoadJobs(0);
  REQUIRE(jobs.size() == 1);
  CHECK(jobs[0].state == "PENDING");
  CHECK(new_leader.InsertJob(Row("bob")).get().id == kept + 1);
}

TEST_CASE("etcd store: writes of one key queued together go to separate transactions and concurrent writers share them",
          "[etcd]") {
  EtcdProcess etcd_proc;
  EtcdClient etcd({etcd_proc.endpoint}, std::chrono::milliseconds(2000));
  // A long quiet gap, so that a loaded machine does not split the writers' batches.
  EtcdStore s(etcd, "/t/", kEtcdMaxTxnOps, GroupCommit{std::chrono::milliseconds(500), std::chrono::milliseconds(100)});
  s.BecomeLeader(TakeLeaderKey(etcd, "/t/"));
  // etcd refuses a transaction that puts and deletes (or puts twice) one key; a refused group
  // commit would fail every write in it. Queued back to back, many of these pairs share a batch.
  std::vector<std::future<void>> writes;
  for (int i = 0; i < 50; ++i) {
    writes.push_back(s.SaveRuntimes("alice:1x1000m,0B|60s", {i}));
    writes.push_back(s.SaveRuntimes("alice:1x1000m,0B|60s", {}));
    writes.push_back(s.SaveRuntimes("bob", {i}));
  }
  for (auto& w : writes) CHECK_NOTHROW(w.get());
  CHECK(s.LoadRuntimes() == std::vector<std::pair<std::string, std::vector<int64_t>>>{{"bob", {49}}});
  // Histories load in the order of their last save (the templates' order of use).
  s.SaveRuntimes("alice", {1}).get();
  s.SaveRuntimes("bob", {2}).get();
  s.SaveRuntimes("alice", {3}).get();
  CHECK(s.LoadRuntimes() == std::vector<std::pair<std::string, std::vector<int64_t>>>{{"bob", {2}}, {"alice", {3}}});
  // 8 writers, each waiting for its write before the next (as 8 clients submitting): group commit
  // gathers them into shared transactions.
  const int64_t before = s.Commits();
  constexpr int kWriters = 8, kEach = 40;
  std::vector<std::thread> writers;
  for (int t = 0; t < kWriters; ++t)
    writers.emplace_back([&s, t] {
      for (int i = 0; i < kEach; ++i) s.InsertJob(Row("u" + std::to_string(t))).get();
    });
  for (auto& t : writers) t.join();
  const int64_t commits = s.Commits() - before;
  INFO(commits << " transactions for " << kWriters * kEach << " writes");
  CHECK(commits <= kWriters * kEach / 6);  // here: 40 (without gathering: 61-69)
}

TEST_CASE("etcd store: an array larger than one etcd transaction is refused whole", "[etcd]") {
  EtcdProcess etcd_proc;
  EtcdClient etcd({etcd_proc.endpoint}, std::chrono::milliseconds(2000));
  EtcdStore s(etcd, "/t/", 32);
  s.BecomeLeader(TakeLeaderKey(etcd, "/t/"));
  CHECK(s.MaxArrayJobs() == 14);
  CHECK_THROWS_WITH(s.InsertJobArray(Row("alice"), 40, [](int64_t, size_t) { return "x"; }).get(),
                    Catch::Contains("etcd allows 32"));
  CHECK(s.LoadJobs(0).empty());
  CHECK(s.InsertJobArray(Row("alice"), 15, [](int64_t, size_t) { return "x"; }).get().id == 1);  // no key: not nested
  // With a submission key the array is a nested transaction, which etcd caps at the limit minus
  // the outer ops: 14 elements fit, 15 are refused whole.
  CHECK_THROWS_WITH(s.InsertJobArray(Row("alice", "arr-15"), 15, [](int64_t, size_t) { return "x"; }).get(),
                    Catch::Contains("etcd allows 32"));
  const int64_t keyed = s.InsertJobArray(Row("alice", "arr-14"), 14, [](int64_t, size_t) { return "x"; }).get().id;
  CHECK(s.InsertJobArray(Row("alice", "arr-14"), 14, [](int64_t, size_t) { return "x"; }).get().id == keyed);
  CHECK(s.LoadJobs(0).size() == 29);
  // Concurrent retries of one submission (one group commit or several): one job, one creator.
  std::vector<std::future<InsertedJob>> same;
  for (int i = 0; i < 6; ++i) same.push_back(s.InsertJob(Row("dave", "same-key")));
  std::set<int64_t> same_ids;
  int created = 0;
  for (auto& x : same) {
    InsertedJob r = x.get();
    same_ids.insert(r.id);
    created += !r.existed;
  }
  CHECK(same_ids.size() == 1);
  CHECK(created == 1);
  CHECK(s.LoadJobs(0).size() == 30);
  // Many small writes at once are split over several transactions, all committed.
  std::vector<std::future<InsertedJob>> f;
  for (int i = 0; i < 100; ++i) f.push_back(s.InsertJob(Row("u" + std::to_string(i), "key" + std::to_string(i))));
  std::set<int64_t> ids;
  for (auto& x : f) ids.insert(x.get().id);
  CHECK(ids.size() == 100);
  CHECK(s.LoadJobs(0).size() == 130);
}

TEST_CASE("leadership: one replica wins and a follower takes over after a resignation", "[etcd]") {
  EtcdProcess etcd_proc;
  EtcdClient etcd({etcd_proc.endpoint}, std::chrono::milliseconds(2000));
  LeaderConfig ca{"/t/", "a:1", 2, std::chrono::milliseconds(50)}, cb{"/t/", "b:1", 2, std::chrono::milliseconds(50)};
  std::atomic<int64_t> epoch_a{0}, epoch_b{0};
  std::atomic<int> lost_a{0};
  auto a = std::make_unique<Leadership>(etcd, ca);
  a->Start([&](int64_t e) { epoch_a = e; }, [&](const std::string&) { ++lost_a; });
  for (int i = 0; i < 100 && !epoch_a; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  REQUIRE(epoch_a > 0);
  Leadership b(etcd, cb);
  b.Start([&](int64_t e) { epoch_b = e; }, [](const std::string&) {});
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  CHECK(epoch_b == 0);
  CHECK(b.Current().leader == "a:1");
  CHECK(b.Current().epoch == epoch_a);
  auto status = BuildHaStatus(b, etcd, "b:1", 0);
  CHECK(status.leader() == "a:1");
  CHECK(status.members_size() == 2);
  const auto t0 = std::chrono::steady_clock::now();
  a->Resign();
  for (int i = 0; i < 100 && !epoch_b; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(epoch_b > epoch_a);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));  // graceful handover
  CHECK(lost_a == 0);
  CHECK(b.Current().is_leader);
}

namespace {

/// Puts `value` at the leader key of `prefix`, keeping its create revision when it exists (a put
/// rewrites in place), bound to `lease` (0 = none): what an intruder with write access could do.
void PutLeaderKey(EtcdClient& etcd, const std::string& prefix, const std::string& value, int64_t lease) {
  etcdpb::TxnRequest txn;
  auto* put = txn.add_success()->mutable_request_put();
  put->set_key(LeaderKey(prefix));
  put->set_value(value);
  put->set_lease(lease);
  etcd.Txn(txn);
}

}  // namespace

TEST_CASE("etcd store: a leader key rewritten in place (same create revision) fences the writes", "[etcd][security]") {
  EtcdProcess etcd_proc;
  EtcdClient etcd({etcd_proc.endpoint}, std::chrono::milliseconds(2000));
  const int64_t lease = etcd.LeaseGrant(30);
  etcdpb::TxnRequest del;
  del.add_success()->mutable_request_delete_range()->set_key(LeaderKey("/t/"));
  etcd.Txn(del);
  etcdpb::TxnRequest take;
  auto* put = take.add_success()->mutable_request_put();
  put->set_key(LeaderKey("/t/"));
  put->set_value("me");
  put->set_lease(lease);
  const int64_t epoch = etcd.Txn(take).header().revision();
  EtcdStore s(etcd, "/t/");
  s.BecomeLeader(epoch, lease, "me");
  REQUIRE(s.InsertJob(Row("alice")).get().id == 1);
  SECTION("the value changes") { PutLeaderKey(etcd, "/t/", "mallory", lease); }
  SECTION("the lease changes") { PutLeaderKey(etcd, "/t/", "me", 0); }
  // The create revision is still the epoch: only the value and lease compares notice.
  etcdpb::RangeRequest r;
  r.set_key(LeaderKey("/t/"));
  REQUIRE(etcd.Range(r).kvs(0).create_revision() == epoch);
  CHECK_THROWS_WITH(s.InsertJob(Row("alice")).get(), Catch::Contains("fenced"));
  CHECK(s.FencedWrites() == 1);
}

TEST_CASE("leadership: a leader whose key is rewritten in place steps down, a lease-less leader key is deleted",
          "[etcd][security]") {
  EtcdProcess etcd_proc;
  EtcdClient etcd({etcd_proc.endpoint}, std::chrono::milliseconds(2000));
  LeaderConfig ca{"/t/", "a:1", 2, std::chrono::milliseconds(50)};
  SECTION("rewritten in place") {
    std::atomic<int64_t> epoch{0};
    std::atomic<int> lost{0};
    std::string why;
    std::mutex mu;
    Leadership a(etcd, ca);
    a.Start([&](int64_t e) { epoch = e; }, [&](const std::string& w) {
      std::lock_guard lk(mu);
      why = w;
      ++lost;
    });
    for (int i = 0; i < 100 && !epoch; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE(epoch > 0);
    PutLeaderKey(etcd, "/t/", "mallory", a.Current().lease);  // same lease, same create revision
    for (int i = 0; i < 100 && !lost; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    REQUIRE(lost == 1);
    std::lock_guard lk(mu);
    CHECK_THAT(why, Catch::Contains("rewritten"));
  }
  SECTION("a key without a lease stops no election") {
    PutLeaderKey(etcd, "/t/", "held forever", 0);
    std::atomic<int64_t> epoch{0};
    Leadership a(etcd, ca);
    a.Start([&](int64_t e) { epoch = e; }, [](const std::string&) {});
    for (int i = 0; i < 100 && !epoch; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(epoch > 0);
    CHECK(a.ForeignLeaderKeys() == 1);
    CHECK(a.Current().leader == "a:1");
  }
}

namespace {

/// A finished job `end` seconds since epoch, with two attempts, through `s`; returns its id.
int64_t FinishedJob(EtcdStore& s, const std::string& user, int64_t end) {
  const int64_t id = s.InsertJob(Row(user)).get().id;
  JobRow r = *s.LoadJob(id);
  r.state = "COMPLETED";
  r.start_time = end - 100;
  r.end_time = end;
  s.UpdateJob(r, "end", "exit 0").get();
  for (int32_t k = 1; k <= 2; ++k) {
    AttemptRow at;
    at.job_id = id;
    at.attempt = k;
    at.start_time = end - 100 + k;
    at.end_time = end - 50 + k;
    at.outcome = k == 1 ? "Evicted" : "COMPLETED";
    at.ntasks = 2;
    s.SaveAttempt(at).get();
  }
  return id;
}

size_t KeysUnder(EtcdClient& etcd, const std::string& prefix) { return etcd.RangePrefix(prefix).size(); }

}  // namespace

TEST_CASE("history archive: old finished jobs and events leave etcd for every replica's SQLite exactly once", "[etcd]") {
  EtcdProcess etcd_proc;
  EtcdClient etcd({etcd_proc.endpoint}, std::chrono::milliseconds(2000));
  EtcdStore s(etcd, "/t/");
  s.BecomeLeader(TakeLeaderKey(etcd, "/t/"));
  const int64_t t = std::time(nullptr);
  const int64_t old_job = FinishedJob(s, "alice", t - 3600);
  const int64_t recent_job = FinishedJob(s, "bob", t + 7000);  // ended after the cutoff: stays
  const int64_t live_job = s.InsertJob(Row("carol")).get().id;
  ArchiveConfig cfg;
  cfg.after_s = 3600;
  const int64_t now = t + 7200;  // cutoff t + 3600: the old job and every event so far are due
  const size_t events_before = KeysUnder(etcd, "/t/events/");
  REQUIRE(events_before >= 2);

  ArchiveCounts moved = ArchiveHistory(etcd, s, cfg, now);
  CHECK(moved.jobs == 1);
  CHECK(moved.events == static_cast<int64_t>(events_before));
  CHECK_FALSE(s.LoadJob(old_job));
  CHECK_FALSE(s.LoadSpec(old_job));
  CHECK(KeysUnder(etcd, "/t/attempts/") == 2);  // the recent job's only
  CHECK(KeysUnder(etcd, "/t/events/") == 0);
  CHECK(s.LoadJob(recent_job));
  CHECK(s.LoadJob(live_job));
  CHECK(ArchiveHistory(etcd, s, cfg, now).jobs == 0);  // nothing is moved twice

  // Two replicas copy it; a second copy finds nothing new (the cursor is in the same transaction).
  TempDir d1, d2;
  SqliteStore h1(d1.path.string()), h2(d2.path.string());
  for (SqliteStore* h : {&h1, &h2}) {
    ArchiveCounts copied = CopyArchive(etcd, "/t/", *h);
    CHECK(copied.jobs == 1);
    CHECK(copied.events == moved.events);
    CHECK(CopyArchive(etcd, "/t/", *h).jobs == 0);
    auto job = h->LoadJob(old_job);
    REQUIRE(job);
    CHECK(job->state == "COMPLETED");
    CHECK(job->user == "alice");
    CHECK(job->end_time == t - 3600);
    CHECK(job->spec == "spec-of-alice");
    auto attempts = h->LoadAttempts(0, t + 1);
    REQUIRE(attempts.size() == 2);
    CHECK(attempts[0].outcome == "Evicted");
    CHECK(h->LoadFinishedJobs(0, t).size() == 1);
  }

  // More history later: only the new entries are copied.
  const int64_t later = FinishedJob(s, "dave", t - 1800);
  CHECK(ArchiveHistory(etcd, s, cfg, now).jobs == 1);
  CHECK(CopyArchive(etcd, "/t/", h1).jobs == 1);
  CHECK(h1.LoadJob(later));
  CHECK(h1.LoadFinishedJobs(0, t).size() == 2);

  // A deposed leader's pass is refused by the fence and moves nothing.
  EtcdStore next(etcd, "/t/");
  next.BecomeLeader(TakeLeaderKey(etcd, "/t/"));
  CHECK_THROWS_WITH(ArchiveHistory(etcd, s, cfg, t + 100000), Catch::Contains("fenced"));
  CHECK(next.LoadJob(recent_job));
  CHECK(next.LoadJob(live_job));
}
