// OPKILN_HD: a function the CPU and CUDA kernel cores share (host/device under nvcc,
// plain inline otherwise), so both decide every borderline case the same way.
#pragma once

#if defined(__CUDACC__)
#define OPKILN_HD __host__ __device__ __forceinline__
#else
#define OPKILN_HD inline
#endif
