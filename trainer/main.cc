// mltrain: data-parallel MLP training on Fashion-MNIST. Rank and world size come from the
// torchrun/agentd environment (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, MLSCHED_RENDEZVOUS_TOKEN, ...).
// Exit codes: 0 done, 1 error, 2 usage, 75 requeue (preempted after a checkpoint, or the
// rendezvous port taken by another process), 76 peer lost.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>

#include "trainer/communicator.h"
#include "trainer/engine.h"
#include "trainer/log.h"
#include "trainer/trainer.h"

namespace {

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return (v != nullptr && *v != '\0') ? v : fallback;
}

struct TextOptions {
  std::string hidden = "256,128", optimizer = "adamw", every, device = "auto", precision = "fp32";
  bool sync_checkpoints = false;
};

void AddOptions(CLI::App& app, mltrain::TrainerConfig& c, TextOptions& t) {
  std::string& hidden = t.hidden;
  std::string& optimizer = t.optimizer;
  std::string& every = t.every;
  bool& sync_checkpoints = t.sync_checkpoints;
  app.add_option("--device", t.device, "cpu, cuda, or auto (cuda when a GPU is visible)")->capture_default_str();
  app.add_option("--precision", t.precision, "fp32, or bf16 (bf16 GEMM inputs, fp32 accumulation and master weights)")->capture_default_str();
  app.add_option("--data-dir", c.data_dir, "Directory with the Fashion-MNIST *-ubyte.gz files")->capture_default_str();
  app.add_option("--train-limit", c.train_limit, "Use only the first N training samples (0: all)");
  app.add_option("--test-limit", c.test_limit, "Evaluate on the first N test samples (0: all)");
  app.add_option("--hidden", hidden, "Hidden layer sizes, comma-separated")->capture_default_str();
  app.add_option("--epochs", c.epochs, "Training epochs")->capture_default_str();
  app.add_option("--batch-size", c.batch_size, "Global batch size (all ranks) per step")->capture_default_str();
  app.add_option("--grad-accum", c.grad_accum, "Micro-batches per rank per step")->capture_default_str();
  app.add_option("--max-steps", c.max_steps, "Stop (with a checkpoint) after this global step; 0: all epochs");
  app.add_flag("--zero1", c.zero1, "Shard the optimizer state over ranks (ZeRO-1): update own block, then all-gather");
  app.add_option("--optimizer", optimizer, "adamw or sgd")->capture_default_str();
  app.add_option("--lr", c.optimizer.lr, "Peak learning rate")->capture_default_str();
  app.add_option("--weight-decay", c.optimizer.weight_decay, "Weight decay")->capture_default_str();
  app.add_option("--momentum", c.optimizer.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--warmup-steps", c.optimizer.warmup_steps, "Linear warm-up steps")->capture_default_str();
  app.add_option("--min-lr-ratio", c.optimizer.min_lr_ratio, "Final LR of the cosine decay, as a fraction of --lr")->capture_default_str();
  app.add_option("--seed", c.seed, "Seed of the initialization and the data order")->capture_default_str();
  app.add_option("--checkpoint-url", c.checkpoint_url, "file:///dir or s3://bucket/prefix (default: $MLSCHED_CHECKPOINT_URL)");
  app.add_option("--checkpoint-every", every, "Checkpoint every N steps, or every Ns / Nm of wall time");
  app.add_flag("--sync-checkpoints", sync_checkpoints, "Write checkpoints synchronously instead of in the background");
  app.add_option("--keep-checkpoints", c.keep_checkpoints, "Committed checkpoints to keep")->capture_default_str();
  app.add_option("--multipart-threshold", c.multipart_threshold, "S3 shards above this many bytes use multipart upload")->capture_default_str();
  app.add_option("--multipart-part-size", c.multipart_part_size, "Bytes per S3 multipart part (S3 needs >= 5 MiB)")->capture_default_str();
  app.add_option("--metrics-out", c.metrics_out, "Write end-of-run metrics as JSON to this file");
  app.add_option("--loss-log", c.loss_log, "Rank 0 appends 'step loss' lines to this file");
  app.add_option("--status-file", c.status_file, "Progress status JSON (default: $MLSCHED_STATUS_FILE)");
  app.add_option("--log-every", c.log_every, "Steps between progress lines")->capture_default_str();
  app.add_option("--threads", c.threads, "OpenBLAS threads per rank (0: cores / LOCAL_WORLD_SIZE)");
  app.add_option("--rendezvous-timeout", c.rendezvous_timeout_s, "Seconds to wait for all ranks to arrive")->capture_default_str();
  app.add_option("--collective-timeout", c.collective_timeout_s, "Seconds one collective may take before the peer is declared lost")->capture_default_str();
  app.add_option("--allreduce", c.allreduce_algorithm, "Gloo all-reduce: ring or halving-doubling")->capture_default_str();
  app.add_flag("!--no-shm-allreduce", c.shm_allreduce, "Ranks on one host all-reduce over Gloo TCP instead of shared memory");
  // Test-only fault injection (the gang watchdog's tests): a "bad node" on demand.
  app.add_option("--test-fault-rank", c.test_faults.rank, "TEST ONLY: the rank the --test-* faults hit");
  app.add_option("--test-fault-node", c.test_faults.node, "TEST ONLY: the node (MLSCHED_NODE) whose ranks the --test-* faults hit");
  app.add_option("--test-hang-at-step", c.test_faults.hang_at_step, "TEST ONLY: hang (ignoring SIGTERM) before this step");
  app.add_option("--test-slow-factor", c.test_faults.slow_factor, "TEST ONLY: compute this many times longer per step");
}

}  // namespace

int main(int argc, char** argv) {
  // First of all: a stop (SIGTERM) that comes while the process starts is remembered and honoured
  // at the first step (checkpoint, exit 75), never the default action that kills the rank.
  mltrain::InstallStopSignalHandlers();
  mltrain::TrainerConfig config;
  TextOptions text;
  config.optimizer.warmup_steps = 200;
  CLI::App app{"mltrain: data-parallel MLP training on Fashion-MNIST (Gloo on CPU, NCCL on GPU)"};
  // A later repetition of an option wins, so wrappers can append overrides.
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  AddOptions(app, config, text);
  CLI11_PARSE(app, argc, argv);
  std::unique_ptr<mltrain::Communicator> comm;
  try {
    config.hidden = mltrain::ParseHiddenSizes(text.hidden);
    config.async_checkpoints = !text.sync_checkpoints;
    config.optimizer.kind = mltrain::ParseOptimizerKind(text.optimizer);
    config.checkpoint_every = mltrain::ParseCheckpointInterval(text.every);
    config.precision = mltrain::ParsePrecision(text.precision);
    const int gpus = mltrain::CudaDeviceCount();
    config.device = mltrain::ParseDevice(text.device, gpus);
    if (config.device == mltrain::Device::kCuda && gpus == 0)
      throw std::runtime_error(mltrain::CudaBuilt() ? "--device cuda: no CUDA device visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)"
                                                    : "--device cuda: this mltrain was built without CUDA");
    if (config.checkpoint_url.empty()) config.checkpoint_url = EnvOr("MLSCHED_CHECKPOINT_URL", "");
    if (config.status_file.empty()) config.status_file = EnvOr("MLSCHED_STATUS_FILE", "");
    config.stop_reason_file = EnvOr("MLSCHED_STOP_REASON_FILE", "");
    config.node_name = EnvOr("MLSCHED_NODE", "");
    mltrain::RendezvousEnv env = mltrain::ReadRendezvousEnv();
    mltrain::SetLogRank(env.world_size > 1 ? env.rank : -1);
    config.Validate(env.world_size);
    mltrain::CommunicatorOptions options;
    options.rendezvous_timeout = std::chrono::milliseconds(static_cast<int64_t>(config.rendezvous_timeout_s * 1000));
    options.collective_timeout = std::chrono::milliseconds(static_cast<int64_t>(config.collective_timeout_s * 1000));
    options.allreduce_algorithm = config.allreduce_algorithm;
    options.shm_allreduce = config.shm_allreduce;
    if (config.device == mltrain::Device::kCuda) {
      config.cuda_device = env.local_rank % gpus;  // agentd's CUDA_VISIBLE_DEVICES leaves this rank's GPUs
      comm = mltrain::CreateCudaCommunicator(env, options, config.cuda_device);
    } else {
      comm = mltrain::CreateCommunicator(env, options);
    }
    mltrain::Trainer trainer(config, *comm);
    mltrain::RunResult result = trainer.Run();
    std::fflush(stdout);
    // Skip destructors: Gloo's teardown can block on peers that already exited.
    std::_Exit(result.exit_code);
  } catch (const mltrain::PeerLostError& e) {
    mltrain::LogError(std::string("peer lost: ") + e.what() + " (exit 76)");
    if (comm) comm->Abort();
    std::fflush(stdout);
    std::_Exit(mltrain::kExitPeerLost);
  } catch (const mltrain::RendezvousPortTakenError& e) {
    // Someone else listens on MASTER_PORT: no fault of the job, and the next attempt gets a fresh
    // port. 75 makes schedd requeue the job (it would fail it on 1 or 76).
    mltrain::LogError(std::string(e.what()) + " (exit 75: the job is requeued)");
    std::fflush(stdout);
    std::_Exit(mltrain::kExitPreempted);
  } catch (const std::invalid_argument& e) {
    mltrain::LogError(e.what());
    std::fflush(stdout);
    std::_Exit(2);
  } catch (const std::exception& e) {
    mltrain::LogError(e.what());
    if (comm) comm->Abort();
    std::fflush(stdout);
    std::_Exit(1);
  }
}
