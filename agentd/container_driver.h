// ContainerDriver: the TaskDriver of tasks that run in OCI images. It wraps the process driver:
// for a request with a container (launcher.h ContainerLaunch) it builds the task's bundle
// (container_bundle.h) and spec (oci_spec.h) and hands the process driver a `runc run` of it in
// place of the command, so the task keeps its cgroup (runc's own cgroup for the container is made
// below it), its process group (runc forwards signals to the container), its output files
// (opened as the user) and its exit status; bare requests pass through unchanged. When the task
// ends its exit is reported at once, and the bundle is unmounted and removed by a teardown thread
// (an unmount can wait seconds while the kernel tears down the container's mount namespace: the
// exits of a node's other ranks are not held behind it).
#pragma once

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "agentd/cdi_plan.h"
#include "agentd/container_bundle.h"
#include "agentd/container_tools.h"
#include "agentd/gpu_driver_files.h"
#include "agentd/oci_spec.h"
#include "agentd/task_driver.h"

namespace mlsched::agent {

class ContainerDriver final : public TaskDriver {
 public:
  /// Makes the process driver with `make_inner`; bundles live in `state_dir`/bundles, runc's
  /// state in `state_dir`/runc and its logs in `state_dir`/logs (made mode 0700 by Start()).
  ContainerDriver(ContainerTools tools, std::string state_dir,
                  const std::function<std::unique_ptr<TaskDriver>(StartedFn, ExitedFn)>& make_inner,
                  StartedFn on_started, ExitedFn on_exited);
  ~ContainerDriver() override;

  void UseCgroups(Cgroups* cgroups) override { inner_->UseCgroups(cgroups); }
  /// The host GPU driver's files (gpu_driver_files.h) bound read-only into every container that
  /// holds GPUs; call before Start().
  void UseGpuDriverFiles(std::vector<DriverFile> files) { driver_files_ = std::move(files); }
  /// The node's CDI specs (cdi_plan.h): a container holding GPUs gets what they say (PlanCdi) in
  /// place of GpuDevices and the driver files; a rank the catalog cannot serve fails to start
  /// with the reason. Call before Start().
  void UseCdi(CdiCatalog catalog) { cdi_ = std::make_unique<CdiCatalog>(std::move(catalog)); }
  /// Makes the state directories (removing a previous run's bundles, runtime state and logs, but
  /// those of adopted tasks), starts the teardown thread, then the inner driver.
  void Start() override;
  /// A container request is turned into a runc invocation first; a bundle that cannot be made is
  /// reported as a launch failure (exit 127 with the reason).
  bool Spawn(const TaskKey& key, LaunchRequest request) override;
  bool Terminate(const TaskKey& key, std::chrono::milliseconds grace) override { return inner_->Terminate(key, grace); }
  bool Signal(const TaskKey& key, int signal) override { return inner_->Signal(key, signal); }
  void TerminateAll(std::chrono::milliseconds grace) override { inner_->TerminateAll(grace); }
  std::vector<RunningTaskInfo> Running() const override { return inner_->Running(); }
  size_t Size() const override { return inner_->Size(); }
  /// The inner driver idle and every ended task's bundle torn down.
  bool WaitIdle(std::chrono::milliseconds timeout) override;
  /// Stops the inner driver, then tears down what is left and ends the teardown thread.
  void Stop() override;
  void Run() override { inner_->Run(); }
  /// The process to the inner driver; for a container task (`container` set) also its bundle in
  /// the state directory (kept by Start(), torn down when the task ends) and its image pin.
  std::string Adopt(const TaskKey& key, pid_t pid, int64_t max_rss_bytes,
                    std::shared_ptr<ContainerLaunch> container) override;
  /// Detaches the inner driver, then tears down the bundles of the tasks that ended before and
  /// ends the teardown thread.
  void Detach() override;
  /// A session in a container task is a `runc exec` into its container (container_exec.h); one
  /// in a bare task runs on the node (the inner driver's).
  std::string PrepareExec(const TaskKey& key, ExecRequest want, ExecPlan* plan) override;

  /// The OciTaskSpec of a container request, minus what only exists at launch (rootfs, bind
  /// sources of user paths): the environment merged as pyxis does (the image's variables win
  /// unless named in keep_env; the task's MLSCHED_*, RANK, ... are added), the command, the
  /// working directory, credentials, the binds and the GPU devices. With `gpu_driver` (the node
  /// binds its driver's files) a task holding GPUs finds them on its LD_LIBRARY_PATH and PATH
  /// (kContainerDriverLibDir, kContainerDriverBinDir appended). Exposed for tests.
  static OciTaskSpec PlanSpec(const TaskKey& key, const LaunchRequest& request, bool gpu_driver = false);

 private:
  struct Live {
    std::unique_ptr<ContainerBundle> bundle;
    std::shared_ptr<UserFds> fds;
    std::shared_ptr<ContainerLaunch> container;
  };
  std::string Prepare(const TaskKey& key, const LaunchRequest& request, LaunchRequest* runc);
  /// Hands the task's bundle to the teardown thread.
  void Finished(const TaskKey& key);
  /// Tears down the bundles handed over so far and ends the teardown thread.
  void EndTeardown();
  void TearDownLoop();

  ContainerTools tools_;
  std::string state_dir_;
  std::vector<DriverFile> driver_files_;
  std::unique_ptr<CdiCatalog> cdi_;  // null: no CDI spec of GPUs on the node
  ExitedFn on_exited_;
  std::unique_ptr<TaskDriver> inner_;
  std::mutex mu_;
  std::map<TaskKey, Live> live_;
  std::deque<std::pair<TaskKey, Live>> ended_;  // bundles to tear down, oldest first
  size_t tearing_down_ = 0;                     // taken by the thread, not done yet
  bool stopping_ = false;
  std::condition_variable teardown_cv_;
  std::thread teardown_;
};

/// Character devices for a rank's GPUs: each of `gpu_paths` and the NVIDIA control devices
/// (/dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools) that exist on the node, with their
/// numbers from stat(). Missing GPU nodes are skipped.
std::vector<OciDevice> GpuDevices(const std::vector<std::string>& gpu_paths);

}  // namespace mlsched::agent
