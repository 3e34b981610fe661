// Error plumbing for nested op calls, and the entry points of the stable C
// shim that this library looks up at run time instead of importing them:
//   - torch_exception_get_what_without_backtrace: added in torch 2.13, above
//     this build's TORCH_TARGET_VERSION, so importing it would break loading
//     on older torch; when present it carries the message of a failed
//     torch_call_dispatcher (an error raised inside a nested op);
//   - aoti_torch_get_current_cuda_stream: lives in libtorch_cuda, which this
//     library does not link (a DT_NEEDED on it would tie the wheel to one
//     torch's CUDA libraries); every CUDA torch has loaded it by the time an
//     op runs on a CUDA tensor.
#include <dlfcn.h>

#include "binding.h"

#if OPKILN_WITH_CUDA
#include "common/arch_check.h"
#endif

namespace opkiln::stable_binding {

std::string& last_kernel_error() {
  thread_local std::string message;
  return message;
}

const char* last_torch_error() {
  using GetWhat = const char* (*)();
  // RTLD_DEFAULT from here searches this library's own scope, libtorch_cpu included.
  static const auto get_what =
      reinterpret_cast<GetWhat>(dlsym(RTLD_DEFAULT, "torch_exception_get_what_without_backtrace"));
  return get_what == nullptr ? nullptr : get_what();
}

#if OPKILN_WITH_CUDA
namespace {

using GetCurrentCudaStream = AOTITorchError (*)(std::int32_t device_index, void** ret_stream);

GetCurrentCudaStream find_current_stream_shim() {
  void* lib = dlopen("libtorch_cuda.so", RTLD_NOW | RTLD_NOLOAD);
  if (lib == nullptr) return nullptr;
  void* sym = dlsym(lib, "aoti_torch_get_current_cuda_stream");
  dlclose(lib);  // RTLD_NOLOAD only took a reference to the copy torch keeps loaded
  return reinterpret_cast<GetCurrentCudaStream>(sym);
}

// Once per device, before the first launch: a GPU that none of our SASS or PTX
// runs on gets an error naming its arch and ours (as ops/torch/binding.h).
void check_kernel_image(std::int32_t device) {
  const kernels::CudaStatus status = kernels::cached_kernel_image_status(device);
  OPKILN_CHECK(!kernels::is_unsupported_gpu(status), kernels::unsupported_gpu_message(device));
  check_cuda_status(status, "kernel image check");
}

}  // namespace

kernels::CudaStream current_cuda_stream(std::int32_t device) {
  check_kernel_image(device);
  static const GetCurrentCudaStream shim = find_current_stream_shim();
  OPKILN_CHECK(shim != nullptr,
                  "opkiln: cannot find aoti_torch_get_current_cuda_stream in a loaded libtorch_cuda.so; "
                  "CUDA kernels need a CUDA build of torch");
  void* stream = nullptr;
  check_shim(shim(device, &stream), "aoti_torch_get_current_cuda_stream");
  return static_cast<kernels::CudaStream>(stream);
}
#endif

}  // namespace opkiln::stable_binding
