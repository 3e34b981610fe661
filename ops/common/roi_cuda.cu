// The batch-index check of common/roi.h on CUDA: an atomicMin over the bad rois' indices.
#include "common/cuda_common.cuh"
#include "common/roi.h"

namespace opkiln::kernels {
// A named namespace, not an anonymous one: nvcc hashes the absolute source path into
// anonymous-namespace names, which would make the fatbin differ between checkouts.
namespace roi_cu {

template <typename T>
__global__ void first_bad_roi_kernel(const T* __restrict__ rois, std::int64_t num_rois, std::int64_t columns,
                                     std::int64_t batch, unsigned long long* __restrict__ first) {
  cuda::grid_stride(num_rois, [&](std::int64_t k) {
    if (!batch_index_valid(cuda::Convert<T>::load(rois[k * columns]), batch)) {
      atomicMin(first, static_cast<unsigned long long>(k));
    }
  });
}

}  // namespace roi_cu

CudaStatus first_bad_roi_cuda(ScalarKind kind, const void* rois, std::int64_t num_rois, std::int64_t columns,
                              std::int64_t batch, void* workspace, std::int64_t* first_bad, CudaStream stream) {
  *first_bad = -1;
  if (num_rois <= 0) return 0;
  auto* first = static_cast<unsigned long long*>(workspace);
  if (const cudaError_t e = cudaMemsetAsync(first, 0xff, sizeof *first, stream); e != cudaSuccess) return e;
  const CudaStatus launched = cuda::dispatch_float_kinds(kind, [&]<typename T>() -> CudaStatus {
    roi_cu::first_bad_roi_kernel<T><<<cuda::grid_for(num_rois), cuda::kThreads, 0, stream>>>(
        static_cast<const T*>(rois), num_rois, columns, batch, first);
    return cuda::last_launch_status();
  });
  if (launched != 0) return launched;
  unsigned long long host = 0;
  if (const cudaError_t e = cudaMemcpyAsync(&host, first, sizeof host, cudaMemcpyDeviceToHost, stream);
      e != cudaSuccess) {
    return e;
  }
  if (const cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess) return e;
  *first_bad = host == ~0ull ? -1 : static_cast<std::int64_t>(host);
  return 0;
}

}  // namespace opkiln::kernels
