// Small CUDA runtime helpers of the GPU path: error checks that throw, and grow-only device and
// pinned host arrays (so that after warm-up no step allocates). Host code; compiled by nvcc (the
// engine) and usable from g++ translation units that include <cuda_runtime.h>.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <utility>

namespace mltrain::cuda {

/// Throws std::runtime_error "<call>: <error name> (<error string>)" unless err is cudaSuccess.
inline void Check(cudaError_t err, const char* call) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

/// Checks a CUDA runtime call, naming it (with its arguments) in the error.
#define MLTRAIN_CUDA_CHECK(call) ::mltrain::cuda::Check((call), #call)

/// Device memory for `capacity()` elements of T; Reserve() only ever grows it (the old contents are
/// dropped: it holds scratch or is refilled by its owner). cudaFree synchronizes the device, so a
/// reallocation cannot pull memory from under queued work.
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() {
    if (ptr_ != nullptr) cudaFree(ptr_);
  }
  void Reserve(size_t count) {
    if (count <= capacity_) return;
    if (ptr_ != nullptr) MLTRAIN_CUDA_CHECK(cudaFree(ptr_));
    ptr_ = nullptr;
    capacity_ = 0;
    MLTRAIN_CUDA_CHECK(cudaMalloc(&ptr_, count * sizeof(T)));
    capacity_ = count;
  }
  T* get() const { return ptr_; }
  size_t capacity() const { return capacity_; }
  void Swap(DeviceArray& other) noexcept {
    std::swap(ptr_, other.ptr_);
    std::swap(capacity_, other.capacity_);
  }

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

/// Page-locked host memory (cudaMallocHost) for staging H2D/D2H copies; grow-only like DeviceArray.
template <typename T>
class PinnedArray {
 public:
  PinnedArray() = default;
  PinnedArray(const PinnedArray&) = delete;
  PinnedArray& operator=(const PinnedArray&) = delete;
  ~PinnedArray() {
    if (ptr_ != nullptr) cudaFreeHost(ptr_);
  }
  void Reserve(size_t count) {
    if (count <= capacity_) return;
    if (ptr_ != nullptr) MLTRAIN_CUDA_CHECK(cudaFreeHost(ptr_));
    ptr_ = nullptr;
    capacity_ = 0;
    MLTRAIN_CUDA_CHECK(cudaMallocHost(&ptr_, count * sizeof(T)));
    capacity_ = count;
  }
  T* get() const { return ptr_; }

 private:
  T* ptr_ = nullptr;
  size_t capacity_ = 0;
};

}  // namespace mltrain::cuda
