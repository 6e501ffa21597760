// A CPU-only build of mltrain: the CUDA entry points of trainer/engine.h say so.
#include <stdexcept>

#include "trainer/engine.h"

namespace mltrain {

std::unique_ptr<ComputeEngine> MakeCudaEngine(const EngineOptions&) {
  throw std::runtime_error("--device cuda: this mltrain was built without CUDA (configure with MLSCHED_WITH_CUDA=ON where nvcc, cuBLAS and NCCL are installed)");
}

int CudaDeviceCount() { return 0; }

bool CudaBuilt() { return false; }

std::unique_ptr<Communicator> CreateCudaCommunicator(const RendezvousEnv&, const CommunicatorOptions&, int) {
  throw std::runtime_error("--device cuda: this mltrain was built without CUDA");
}

}  // namespace mltrain
