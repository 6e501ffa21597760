// The data-parallel training loop: data order, gradient all-reduce, checkpoints, preemption.
#pragma once

#include <atomic>
#include <future>
#include <memory>
#include <optional>

#include "trainer/checkpoint.h"
#include "trainer/communicator.h"
#include "trainer/config.h"
#include "trainer/dataset.h"
#include "trainer/engine.h"
#include "trainer/sampler.h"

namespace mltrain {

/// Installs the SIGTERM/SIGINT handler that requests a clean stop (SA_RESTART, async-signal-safe)
/// and ignores SIGPIPE, so a dead peer surfaces as a collective error (exit 76).
void InstallStopSignalHandlers();
/// Longest stop reason read (characters); agentd writes at most 32.
inline constexpr int kMaxStopReasonBytes = 32;
/// The first word of the file at `path` (MLSCHED_STOP_REASON_FILE, written by agentd before the
/// SIGTERM): "resize", "eviction", "preemption"; "" when `path` is empty or unreadable.
std::string StopReason(const std::string& path);
/// True once SIGTERM/SIGINT arrived (or RequestStop was called).
bool StopRequested();
void RequestStop();

/// Result of a run: the process exit code and the end-of-run figures.
struct RunResult {
  int exit_code = 0;  ///< 0 done, kExitPreempted after a stop
  int64_t steps = 0;  ///< global step reached
  double test_accuracy = 0, test_loss = 0, samples_per_s = 0, wall_s = 0;
};

/// Trains the MLP on Fashion-MNIST across the communicator's ranks.
/// Each step: every rank computes the gradient of its disjoint slice of the global batch (split
/// into grad_accum micro-batches) scaled by 1/batch_size, then one all-reduce of the flat gradient
/// buffer (with the loss, correct count, stop flag and checkpoint flag appended) gives every rank
/// the global mean gradient, and every rank applies the same optimizer update. With ZeRO-1
/// (config.zero1) the gradient is reduce-scattered instead (each rank gets the mean gradient of its
/// BlockRange block only), the appended figures are all-reduced on their own, each rank updates its
/// block with its shard of the optimizer state, and an all-gather gives every rank all parameters.
class Trainer {
 public:
  Trainer(TrainerConfig config, Communicator& comm);
  ~Trainer();
  /// Runs to the end (or max_steps, or a stop request). Throws PeerLostError when a peer is lost,
  /// std::runtime_error/invalid_argument on bad data or settings.
  RunResult Run();

 private:
  struct StepStats {
    double loss_sum = 0, correct = 0;
    bool stop = false, checkpoint = false, uploads_done = false;
  };
  void LoadData();
  void InitializeOrResume();
  StepStats TrainStep();
  /// config.test_faults on this rank: hangs forever, or sleeps (slow_factor - 1) x the step's compute.
  void InjectTestFaults(double step_t0);
  std::shared_ptr<TrainingState> Snapshot();
  /// Starts a checkpoint of the current step: in the background when async, else synchronously.
  void StartCheckpoint();
  /// Waits for this rank's in-flight shard write, then commits it (collective).
  void FinishPending();
  void CommitSnapshot(const TrainingState& state, const CheckpointManager::ShardWrite& mine);
  /// Synchronous checkpoint of the current step (at a stop or the end), after any pending one.
  void SaveCheckpoint();
  void ReportProgress(double interval_loss, double interval_acc, double samples_per_s);
  void WriteStatus(const std::string& phase, double loss);
  RunResult Finish(int exit_code, double train_seconds, int64_t samples_done);

  TrainerConfig config_;
  Communicator& comm_;
  Dataset train_, test_;
  std::unique_ptr<ComputeEngine> engine_;  // model, gradient (+ kExtras trailing slots), optimizer
  std::unique_ptr<ObjectStore> store_;
  std::unique_ptr<CheckpointManager> checkpoints_;
  struct PendingCheckpoint {
    std::shared_ptr<TrainingState> state;
    std::future<CheckpointManager::ShardWrite> write;
    double started_mono = 0;
  };
  std::optional<PendingCheckpoint> pending_;
  std::vector<float> extras_;           // host copy of the gradient buffer's trailing slots
  SampleRange state_block_;            // optimizer state elements this rank owns
  std::vector<float> batch_x_;
  std::vector<uint8_t> batch_y_;
  std::vector<uint32_t> order_;
  int64_t order_epoch_ = -1;
  int64_t step_ = 0, steps_per_epoch_ = 0, total_steps_ = 0;
  int64_t last_checkpoint_step_ = -1;
  double last_checkpoint_unix_ = 0, last_checkpoint_mono_ = 0, last_loss_ = 0, last_samples_per_s_ = 0;
  double start_mono_ = 0;
  double comm_seconds_ = 0;  // rank's wall time inside the per-step collectives (waiting for peers included)
  double train_start_mono_ = 0;  // when the training loop began (0 = not yet): compute_s in the status file
  std::string stop_reason_;  // on a stop: the scheduler's reason (StopReason), "" when none was given
};

}  // namespace mltrain
