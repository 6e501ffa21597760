#include "trainer/trainer.h"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <thread>

#include "trainer/log.h"
#include "trainer/sampler.h"

namespace mltrain {
namespace {

volatile sig_atomic_t g_stop = 0;
void OnStopSignal(int) { g_stop = 1; }

// Trailing slots of the all-reduce buffer after the gradient.
enum Extra { kLossSum = 0, kCorrect, kStopFlag, kCheckpointFlag, kUploadsDone, kExtras };

double MonoSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void WriteFileAtomically(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp-" + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << text;
    if (!out) throw std::runtime_error("cannot write '" + tmp + "'");
  }
  std::filesystem::rename(tmp, path);
}

int DefaultThreads() {
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  int per_node = local ? std::max(1, std::atoi(local)) : 1;
  return std::max(1, static_cast<int>(cores) / per_node);
}

}  // namespace

std::string StopReason(const std::string& path) {
  if (path.empty()) return "";
  std::ifstream in(path);
  std::string word;
  if (!in || !(in >> std::setw(kMaxStopReasonBytes) >> word)) return "";
  return word;
}

void InstallStopSignalHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  // A peer that dies closes its sockets: writing to them must fail with EPIPE (then exit 76 with
  // "peer lost"), not kill this rank with SIGPIPE (exit 141).
  signal(SIGPIPE, SIG_IGN);
}
bool StopRequested() { return g_stop != 0; }
void RequestStop() { g_stop = 1; }

Trainer::Trainer(TrainerConfig config, Communicator& comm) : config_(std::move(config)), comm_(comm) {
  config_.Validate(comm_.world_size());
}

Trainer::~Trainer() = default;

void Trainer::LoadData() {
  train_ = LoadFashionMnist(config_.data_dir, Split::kTrain, config_.train_limit);
  if (comm_.rank() == 0) test_ = LoadFashionMnist(config_.data_dir, Split::kTest, config_.test_limit);
  steps_per_epoch_ = train_.count / config_.batch_size;
  if (steps_per_epoch_ < 1)
    throw std::invalid_argument("--batch-size " + std::to_string(config_.batch_size) + " exceeds the " + std::to_string(train_.count) + " training samples");
  total_steps_ = steps_per_epoch_ * config_.epochs;
  config_.optimizer.total_steps = total_steps_;
}

void Trainer::InitializeOrResume() {
  const auto model_json = config_.ToJson(train_.features, train_.num_classes);
  const Mlp shape(config_.Layers(train_.features, train_.num_classes));
  const size_t P = shape.parameter_count();
  state_block_ = config_.zero1 ? BlockRange(static_cast<int64_t>(P), comm_.rank(), comm_.world_size()) : SampleRange{0, static_cast<int64_t>(P)};
  EngineOptions eo;
  eo.layers = shape.layer_sizes();
  eo.precision = config_.precision;
  eo.optimizer = config_.optimizer;
  eo.state_begin = static_cast<size_t>(state_block_.begin);
  eo.state_end = static_cast<size_t>(state_block_.end);
  eo.extras = kExtras;
  eo.threads = config_.threads > 0 ? config_.threads : DefaultThreads();
  eo.device = config_.cuda_device;
  engine_ = config_.device == Device::kCuda ? MakeCudaEngine(eo) : MakeCpuEngine(eo);
  extras_.assign(kExtras, 0.0f);
  if (comm_.rank() == 0) LogInfo("compute: " + engine_->Describe() + ", " + std::to_string(P) + " parameters");
  std::vector<float> params(P, 0.0f);
  if (!config_.checkpoint_url.empty()) {
    store_ = OpenObjectStore(config_.checkpoint_url, config_.multipart_threshold, config_.multipart_part_size);
    checkpoints_ = std::make_unique<CheckpointManager>(*store_, comm_, config_.keep_checkpoints);
  }
  std::optional<TrainingState> resumed;
  std::exception_ptr load_error;
  if (checkpoints_ && comm_.rank() == 0) {
    try {
      resumed = checkpoints_->Load(model_json);
    } catch (const std::exception&) {
      load_error = std::current_exception();
    }
  }
  // header: {-1 rank 0 failed | 0 fresh start | 1 resume, step}; so peers fail fast, not by timeout.
  int64_t header[2] = {load_error ? -1 : (resumed ? 1 : 0), resumed ? resumed->step : 0};
  comm_.Broadcast({reinterpret_cast<uint8_t*>(header), sizeof(header)}, 0);
  if (load_error) std::rethrow_exception(load_error);
  if (header[0] < 0) throw std::runtime_error("rank 0 could not load the checkpoint from " + store_->Describe() + " (see its log)");
  if (header[0] == 0) {
    shape.Initialize(params, config_.seed);
    engine_->LoadParams(params);
    return;
  }
  // Full moments travel from rank 0; each rank keeps its state range (all of it without ZeRO-1).
  const bool adamw = config_.optimizer.kind == OptimizerKind::kAdamW;
  std::vector<float> m(P, 0.0f), v(adamw ? P : 0, 0.0f);
  if (resumed) {
    params = resumed->params;
    m = resumed->first_moment;
    if (!v.empty()) v = resumed->second_moment;
    if (resumed->config.value("batch_size", int64_t{0}) != config_.batch_size || resumed->seed != config_.seed)
      LogWarn("resuming with a different batch size or seed than the checkpoint: the trajectory will differ");
  }
  auto bytes = [](std::vector<float>& x) { return std::span<uint8_t>(reinterpret_cast<uint8_t*>(x.data()), x.size() * sizeof(float)); };
  comm_.Broadcast(bytes(params), 0);
  comm_.Broadcast(bytes(m), 0);
  comm_.Broadcast(bytes(v), 0);
  auto shard = [&](const std::vector<float>& full) {
    return full.empty() ? std::span<const float>{} : std::span<const float>(full).subspan(static_cast<size_t>(state_block_.begin), static_cast<size_t>(state_block_.size()));
  };
  engine_->LoadParams(params);
  engine_->LoadMoments(shard(m), shard(v));
  step_ = header[1];
  last_checkpoint_step_ = step_;
  last_checkpoint_unix_ = UnixSeconds();
  if (comm_.rank() == 0) LogInfo("resumed from " + store_->Describe() + "/" + StepDir(step_) + " on " +
                                     std::to_string(comm_.world_size()) + " rank" + (comm_.world_size() == 1 ? "" : "s"));
}

Trainer::StepStats Trainer::TrainStep() {
  const int64_t epoch = step_ / steps_per_epoch_;
  if (epoch != order_epoch_) {
    order_ = EpochPermutation(config_.seed, epoch, train_.count);
    order_epoch_ = epoch;
  }
  const int64_t batch_start = (step_ % steps_per_epoch_) * config_.batch_size;
  const double step_t0 = MonoSeconds();
  const SampleRange mine = RankSlice(config_.batch_size, comm_.rank(), comm_.world_size());
  engine_->ZeroGrad();
  const float scale = 1.0f / static_cast<float>(config_.batch_size);
  BatchStats local;
  for (int64_t m = 0; m < config_.grad_accum; ++m) {
    SampleRange micro = BlockRange(mine.size(), static_cast<int>(m), static_cast<int>(config_.grad_accum));
    const int n = static_cast<int>(micro.size());
    batch_x_.resize(static_cast<size_t>(n) * train_.features);
    batch_y_.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      uint32_t sample = order_[static_cast<size_t>(batch_start + mine.begin + micro.begin + i)];
      std::memcpy(batch_x_.data() + static_cast<size_t>(i) * train_.features, train_.Image(sample), sizeof(float) * train_.features);
      batch_y_[static_cast<size_t>(i)] = train_.labels[sample];
    }
    BatchStats s = engine_->ForwardBackward(batch_x_.data(), batch_y_.data(), n, scale);
    local.loss_sum += s.loss_sum;
    local.correct += s.correct;
  }
  InjectTestFaults(step_t0);
  extras_[kLossSum] = static_cast<float>(local.loss_sum);
  extras_[kCorrect] = static_cast<float>(local.correct);
  extras_[kStopFlag] = StopRequested() ? 1.0f : 0.0f;
  const bool time_due = comm_.rank() == 0 && config_.checkpoint_every.seconds > 0 &&
                        MonoSeconds() - last_checkpoint_mono_ >= config_.checkpoint_every.seconds;
  extras_[kCheckpointFlag] = time_due ? 1.0f : 0.0f;
  const bool my_upload_done = pending_ && pending_->write.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  extras_[kUploadsDone] = my_upload_done ? 1.0f : 0.0f;
  engine_->SetExtras(extras_);
  double t0 = MonoSeconds();
  const std::span<float> grad = engine_->GradBuffer();  // P gradient elements, then the extras
  const size_t P = engine_->parameter_count();
  if (config_.zero1) {
    // Each rank updates only its block of the parameters: the gradient is reduce-scattered (half
    // the bytes of an all-reduce); the loss, counts and flags are summed on every rank.
    comm_.ReduceScatterSum(grad.first(P));
    comm_.AllReduceSum(grad.subspan(P));
  } else {
    comm_.AllReduceSum(grad);  // the one gradient all-reduce of the step
  }
  comm_seconds_ += MonoSeconds() - t0;
  engine_->GetExtras(extras_);
  engine_->OptimizerStep(step_, static_cast<size_t>(state_block_.begin), static_cast<size_t>(state_block_.end));
  if (config_.zero1) {
    t0 = MonoSeconds();
    comm_.AllGather(engine_->ParamBuffer());  // every rank's updated block to every rank
    comm_seconds_ += MonoSeconds() - t0;
  }
  ++step_;
  StepStats out{extras_[kLossSum], extras_[kCorrect], extras_[kStopFlag] > 0, extras_[kCheckpointFlag] > 0,
                pending_.has_value() && extras_[kUploadsDone] > static_cast<float>(comm_.world_size()) - 0.5f};
  if (config_.checkpoint_every.steps > 0 && step_ % config_.checkpoint_every.steps == 0) out.checkpoint = true;
  return out;
}

void Trainer::InjectTestFaults(double step_t0) {
  const TestFaults& f = config_.test_faults;
  if (!f.Applies(comm_.rank(), config_.node_name)) return;
  if (f.hang_at_step > 0 && step_ + 1 >= f.hang_at_step) {
    LogWarn("--test-hang-at-step: rank " + std::to_string(comm_.rank()) + " hangs before step " + std::to_string(step_ + 1) +
            " outside every collective, deaf to SIGTERM (test fault)");
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  if (f.slow_factor > 1) {
    const double took = MonoSeconds() - step_t0;
    std::this_thread::sleep_for(std::chrono::duration<double>(took * (f.slow_factor - 1)));
  }
}

std::shared_ptr<TrainingState> Trainer::Snapshot() {
  auto state = std::make_shared<TrainingState>();
  state->step = step_;
  state->epoch = step_ / steps_per_epoch_;
  state->sample_cursor = step_ * config_.batch_size;
  state->seed = config_.seed;
  state->params.assign(engine_->parameter_count(), 0.0f);
  engine_->SaveParams(state->params);
  engine_->SaveMoments(&state->first_moment, &state->second_moment);
  state->moment_offset = state_block_.begin;
  state->config = config_.ToJson(train_.features, train_.num_classes);
  return state;
}

void Trainer::StartCheckpoint() {
  if (!checkpoints_ || last_checkpoint_step_ == step_) return;
  FinishPending();  // at most one checkpoint in flight
  last_checkpoint_mono_ = MonoSeconds();
  auto state = Snapshot();
  if (!config_.async_checkpoints) {
    CommitSnapshot(*state, checkpoints_->WriteShard(*state));
    return;
  }
  CheckpointManager* manager = checkpoints_.get();
  pending_ = PendingCheckpoint{state, std::async(std::launch::async, [manager, state] { return manager->WriteShard(*state); }), MonoSeconds()};
}

void Trainer::FinishPending() {
  if (!pending_) return;
  PendingCheckpoint p = std::move(*pending_);
  pending_.reset();
  CommitSnapshot(*p.state, p.write.get());
}

void Trainer::CommitSnapshot(const TrainingState& state, const CheckpointManager::ShardWrite& mine) {
  const double t0 = MonoSeconds();
  if (checkpoints_->Commit(state, mine)) {
    last_checkpoint_step_ = state.step;
    last_checkpoint_unix_ = UnixSeconds();
    if (comm_.rank() == 0) {
      char line[160];
      std::snprintf(line, sizeof(line), " committed at step %lld (commit %.3f s)", static_cast<long long>(step_), MonoSeconds() - t0);
      LogInfo("checkpoint " + store_->Describe() + "/" + StepDir(state.step) + line);
    }
  }
  WriteStatus("running", last_loss_);
}

void Trainer::SaveCheckpoint() {
  if (!checkpoints_) return;
  FinishPending();
  if (last_checkpoint_step_ == step_) return;
  auto state = Snapshot();
  CommitSnapshot(*state, checkpoints_->WriteShard(*state));
  last_checkpoint_mono_ = MonoSeconds();
}

void Trainer::WriteStatus(const std::string& phase, double loss) {
  if (config_.status_file.empty()) return;
  nlohmann::json status = {{"phase", phase}, {"rank", comm_.rank()}, {"world_size", comm_.world_size()},
                           {"step", step_}, {"total_steps", total_steps_}, {"epoch", steps_per_epoch_ ? step_ / steps_per_epoch_ : 0},
                           {"loss", loss}, {"samples_per_s", last_samples_per_s_}, {"last_checkpoint_step", last_checkpoint_step_},
                           {"last_checkpoint_unix_s", last_checkpoint_unix_}, {"updated_unix_s", UnixSeconds()}};
  // Seconds of the training loop spent outside the step's collectives: a slow node's ranks compute
  // longer per step while the others wait (schedd's straggler check, policies/README.md [watchdog]).
  if (train_start_mono_ > 0) status["compute_s"] = std::max(0.0, MonoSeconds() - train_start_mono_ - comm_seconds_);
  try {
    WriteFileAtomically(config_.status_file, status.dump() + "\n");
  } catch (const std::exception& e) {
    LogWarn(std::string("status file: ") + e.what());
  }
}

void Trainer::ReportProgress(double loss, double acc, double samples_per_s) {
  last_samples_per_s_ = samples_per_s;
  WriteStatus("running", loss);
  if (comm_.rank() != 0) return;
  char line[256];
  std::snprintf(line, sizeof(line), "step %lld/%lld epoch %lld loss %.4f train_acc %.4f lr %.3g samples/s %.0f last_checkpoint_step %lld\n",
                static_cast<long long>(step_), static_cast<long long>(total_steps_), static_cast<long long>(step_ / steps_per_epoch_), loss, acc,
                LearningRateAt(config_.optimizer, step_ - 1), samples_per_s, static_cast<long long>(last_checkpoint_step_));
  std::fputs(line, stdout);
  std::fflush(stdout);
}

RunResult Trainer::Run() {
  start_mono_ = MonoSeconds();
  LoadData();
  InitializeOrResume();
  last_checkpoint_mono_ = MonoSeconds();
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> loss_log(nullptr, &std::fclose);
  if (comm_.rank() == 0 && !config_.loss_log.empty()) loss_log.reset(std::fopen(config_.loss_log.c_str(), "a"));
  const int64_t end_step = config_.max_steps > 0 ? std::min(config_.max_steps, total_steps_) : total_steps_;
  const double train_start = MonoSeconds();
  train_start_mono_ = train_start;
  double interval_start = train_start, interval_loss = 0, interval_correct = 0;
  int64_t interval_steps = 0, samples_done = 0;
  while (step_ < end_step) {
    StepStats s = TrainStep();
    samples_done += config_.batch_size;
    last_loss_ = s.loss_sum / static_cast<double>(config_.batch_size);
    if (loss_log) std::fprintf(loss_log.get(), "%lld %.9g\n", static_cast<long long>(step_), last_loss_);
    interval_loss += s.loss_sum;
    interval_correct += s.correct;
    ++interval_steps;
    if (step_ % config_.log_every == 0 || step_ == end_step || s.stop) {
      double now = MonoSeconds();
      double n = static_cast<double>(interval_steps * config_.batch_size);
      ReportProgress(interval_loss / n, interval_correct / n, n / std::max(1e-9, now - interval_start));
      interval_start = now;
      interval_loss = interval_correct = 0;
      interval_steps = 0;
    }
    if (s.uploads_done) FinishPending();  // every rank's shard is written: commit without waiting
    if (s.stop) {
      stop_reason_ = StopReason(config_.stop_reason_file);
      if (comm_.rank() == 0)
        LogInfo("stop requested (SIGTERM): checkpointing at step " + std::to_string(step_) +
                (stop_reason_.empty() ? "" : " (reason: " + stop_reason_ + ")"));
      SaveCheckpoint();
      return Finish(kExitPreempted, MonoSeconds() - train_start, samples_done);
    }
    if (s.checkpoint) StartCheckpoint();
  }
  SaveCheckpoint();
  return Finish(0, MonoSeconds() - train_start, samples_done);
}

RunResult Trainer::Finish(int exit_code, double train_seconds, int64_t samples_done) {
  // Last collective: no rank exits (closing its connections) while a peer is still inside the
  // checkpoint commit. Its own failure is harmless now, since everything is committed.
  try {
    comm_.Barrier();
  } catch (const PeerLostError& e) {
    LogWarn(std::string("final barrier: ") + e.what());
  }
  RunResult r;
  r.exit_code = exit_code;
  r.steps = step_;
  r.samples_per_s = samples_done / std::max(1e-9, train_seconds);
  // A resize is a checkpoint-and-restart the scheduler chose to grow the job: not a preemption.
  const bool resize = exit_code == kExitPreempted && stop_reason_ == "resize";
  WriteStatus(exit_code != kExitPreempted ? "done" : resize ? "resizing" : "preempted", last_loss_);
  if (comm_.rank() != 0) {
    r.wall_s = MonoSeconds() - start_mono_;
    return r;
  }
  if (exit_code == 0 && test_.count > 0) {
    BatchStats t = engine_->Evaluate(test_.images.data(), test_.labels.data(), test_.count);
    r.test_accuracy = static_cast<double>(t.correct) / static_cast<double>(test_.count);
    r.test_loss = t.loss_sum / static_cast<double>(test_.count);
  }
  r.wall_s = MonoSeconds() - start_mono_;
  std::printf("%s at step %lld: test_accuracy %.4f test_loss %.4f samples/s %.0f wall %.1f s, in collectives %.2f s (%d rank%s, %s)\n",
              exit_code == 0 ? "done" : resize ? "resized" : "preempted", static_cast<long long>(step_), r.test_accuracy, r.test_loss, r.samples_per_s,
              r.wall_s, comm_seconds_, comm_.world_size(), comm_.world_size() == 1 ? "" : "s", comm_.backend().c_str());
  std::fflush(stdout);
  if (!config_.metrics_out.empty()) {
    nlohmann::json m = {{"test_accuracy", r.test_accuracy}, {"test_loss", r.test_loss}, {"steps", r.steps},
                        {"samples_per_s", r.samples_per_s}, {"wall_s", r.wall_s}, {"train_s", train_seconds},
                        {"collective_s", comm_seconds_},
                        {"world_size", comm_.world_size()}, {"preempted", exit_code == kExitPreempted && !resize},
                        {"stop_reason", stop_reason_},
                        {"last_checkpoint_step", last_checkpoint_step_}, {"final_train_loss", last_loss_}};
    WriteFileAtomically(config_.metrics_out, m.dump(2) + "\n");
  }
  return r;
}

}  // namespace mltrain
