// The stable-ABI facade's out-of-line parts: the opkiln namespace, error
// plumbing for nested op calls, and the entry points of the stable C shim that
// this library looks up at run time instead of importing them:
//   - torch_exception_get_what_without_backtrace: added in torch 2.13, above
//     this build's TORCH_TARGET_VERSION, so importing it would break loading
//     on older torch; when present it carries the message of a failed
//     torch_call_dispatcher (an error raised inside a nested op);
//   - aoti_torch_get_current_cuda_stream: lives in libtorch_cuda, which this
//     library does not link (a DT_NEEDED on it would tie the wheel to one
//     torch's CUDA libraries); every CUDA torch has loaded it by the time an
//     op runs on a CUDA tensor.
#include <dlfcn.h>

#include "facade/facade.h"

// Each op adds its schemas (OPKILN_SCHEMAS, a fragment) and kernels in its own
// ops/<op>/binding.cpp; this block only claims the namespace.
STABLE_TORCH_LIBRARY(opkiln, m) { static_cast<void>(m); }

namespace opkiln::facade {

KernelError& last_kernel_error() {
  thread_local KernelError error;
  return error;
}

const char* last_torch_error() {
  using GetWhat = const char* (*)();
  // RTLD_DEFAULT from here searches this library's own scope, libtorch_cpu included.
  static const auto get_what =
      reinterpret_cast<GetWhat>(dlsym(RTLD_DEFAULT, "torch_exception_get_what_without_backtrace"));
  return get_what == nullptr ? nullptr : get_what();
}

#if OPKILN_WITH_CUDA
namespace stable_cpp {

using GetCurrentCudaStream = AOTITorchError (*)(std::int32_t device_index, void** ret_stream);

GetCurrentCudaStream find_current_stream_shim() {
  void* lib = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  void* sym = dlsym(lib, "aoti_torch_get_current_cuda_stream");
  dlclose(lib);  // RTLD_NOLOAD only took a reference to the copy torch keeps loaded
  return reinterpret_cast<GetCurrentCudaStream>(sym);
}

}  // namespace stable_cpp

CudaStream current_cuda_stream(int device) {
  static const stable_cpp::GetCurrentCudaStream shim = stable_cpp::find_current_stream_shim();
  OPKILN_CHECK(shim != nullptr,
               "opkiln: cannot find aoti_torch_get_current_cuda_stream in a loaded libtorch_cuda.so; "
               "CUDA kernels need a CUDA build of torch");
  void* stream = nullptr;
  check_shim(shim(static_cast<std::int32_t>(device), &stream), "aoti_torch_get_current_cuda_stream");
  return static_cast<CudaStream>(stream);
}
#endif

}  // namespace opkiln::facade
