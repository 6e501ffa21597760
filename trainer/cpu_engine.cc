// CpuEngine: the model on the host (trainer/engine.h).
#include <cblas.h>

#include <algorithm>
#include <stdexcept>

#include "trainer/engine.h"

namespace mltrain {
namespace {

class CpuEngine final : public ComputeEngine {
 public:
  explicit CpuEngine(const EngineOptions& o)
      : model_(o.layers, o.precision),
        optimizer_(o.optimizer, model_.parameter_count(), o.state_begin, o.state_end),
        threads_(o.threads),
        params_(model_.parameter_count(), 0.0f),
        grad_(model_.parameter_count() + o.extras, 0.0f) {
    openblas_set_num_threads(threads_);
  }
  std::string Describe() const override {
    return "cpu " + PrecisionName(model_.precision()) + " (OpenBLAS, " + std::to_string(threads_) + " thread" +
           (threads_ == 1 ? "" : "s") + ")";
  }
  size_t parameter_count() const override { return model_.parameter_count(); }
  void LoadParams(std::span<const float> p) override {
    if (p.size() != params_.size()) throw std::invalid_argument("LoadParams: wrong parameter count");
    std::copy(p.begin(), p.end(), params_.begin());
  }
  void SaveParams(std::span<float> p) override {
    if (p.size() != params_.size()) throw std::invalid_argument("SaveParams: wrong parameter count");
    std::copy(params_.begin(), params_.end(), p.begin());
  }
  void LoadMoments(std::span<const float> first, std::span<const float> second) override {
    auto load = [](std::span<const float> from, std::vector<float>& to) {
      if (from.size() != to.size()) throw std::invalid_argument("LoadMoments: wrong state size");
      std::copy(from.begin(), from.end(), to.begin());
    };
    load(first, optimizer_.first_moment());
    load(second, optimizer_.second_moment());
  }
  void SaveMoments(std::vector<float>* first, std::vector<float>* second) override {
    *first = optimizer_.first_moment();
    *second = optimizer_.second_moment();
  }
  void ZeroGrad() override { std::fill(grad_.begin(), grad_.end(), 0.0f); }
  BatchStats ForwardBackward(const float* x, const uint8_t* y, int n, float grad_scale) override {
    return model_.ForwardBackward(params_, x, y, n, grad_scale, {grad_.data(), params_.size()});
  }
  std::span<float> GradBuffer() override { return grad_; }
  std::span<float> ParamBuffer() override { return params_; }
  void SetExtras(std::span<const float> e) override {
    if (params_.size() + e.size() != grad_.size()) throw std::invalid_argument("SetExtras: wrong count");
    std::copy(e.begin(), e.end(), grad_.begin() + static_cast<std::ptrdiff_t>(params_.size()));
  }
  void GetExtras(std::span<float> e) override {
    if (params_.size() + e.size() != grad_.size()) throw std::invalid_argument("GetExtras: wrong count");
    std::copy(grad_.begin() + static_cast<std::ptrdiff_t>(params_.size()), grad_.end(), e.begin());
  }
  void OptimizerStep(int64_t step, size_t begin, size_t end) override {
    optimizer_.Step(params_, {grad_.data(), params_.size()}, step, begin, end);
  }
  BatchStats Evaluate(const float* x, const uint8_t* y, int64_t n) override { return model_.Evaluate(params_, x, y, n); }

 private:
  Mlp model_;
  Optimizer optimizer_;
  int threads_;
  std::vector<float> params_, grad_;
};

}  // namespace

std::unique_ptr<ComputeEngine> MakeCpuEngine(const EngineOptions& options) { return std::make_unique<CpuEngine>(options); }

}  // namespace mltrain
