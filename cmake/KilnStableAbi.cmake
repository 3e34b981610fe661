# The LibTorch stable-ABI build (KILN_ABI_MODE=stable, or a STABLE_ABI library).
#
# One wheel per CUDA variant serves every torch from the floor
# (KILN_STABLE_TORCH_MIN, from the matrix's stable_abi entry) on and every CPython >= 3.10:
#   - TORCH_STABLE_ONLY: any non-stable torch header is a compile error;
#   - TORCH_TARGET_VERSION = the floor: the stable headers then use only the
#     C-shim entry points that the floor's libtorch already exports;
#   - linked to libtorch_cpu only (the stable C shim), plus the CUDA runtime
#     for a CUDA build: no libc10, no libc10_cuda, no libtorch_cuda;
#   - Py_LIMITED_API 3.10 for Python modules (kiln_add_torch_library: python_add_library USE_SABI).
include_guard(GLOBAL)

# kiln_torch_version_hex(<version> <out-var>)
#   "2.11" -> 0x20b000000000000 (TORCH_ABI_VERSION layout: major << 56 | minor << 48)
function(kiln_torch_version_hex version out)
  if(NOT version MATCHES "^([0-9]+)\\.([0-9]+)")
    message(FATAL_ERROR "kiln: '${version}' is not a torch version (expected e.g. 2.11)")
  endif()
  math(EXPR hex "(${CMAKE_MATCH_1} << 56) | (${CMAKE_MATCH_2} << 48)" OUTPUT_FORMAT HEXADECIMAL)
  set(${out} "${hex}" PARENT_SCOPE)
endfunction()

# kiln_add_stable_torch_target()
#   Defines kiln::torch_stable once: torch's include dir, TORCH_STABLE_ONLY, TORCH_TARGET_VERSION
#   (the floor), KILN_STABLE_ABI=1, libtorch_cpu; in a CUDA variant also the CUDA runtime and
#   KILN_WITH_CUDA=1.
function(kiln_add_stable_torch_target)
  if(TARGET kiln::torch_stable)
    return()
  endif()
  if(NOT KILN_STABLE_TORCH_MIN)
    message(FATAL_ERROR "kiln: KILN_STABLE_TORCH_MIN is not set (kiln_configure() sets it)")
  endif()
  if(KILN_TORCH_PUBLIC_VERSION VERSION_LESS KILN_STABLE_TORCH_MIN)
    message(FATAL_ERROR "kiln: a stable-ABI build needs torch >= ${KILN_STABLE_TORCH_MIN} headers, "
                        "this venv has torch ${KILN_TORCH_VERSION}")
  endif()
  set(lib "${KILN_TORCH_LIB_DIR}/libtorch_cpu.so")
  if(NOT EXISTS "${lib}")
    message(FATAL_ERROR "kiln: ${lib} is missing")
  endif()
  list(GET KILN_TORCH_INCLUDE_DIRS 0 include_dir)
  if(NOT EXISTS "${include_dir}/torch/csrc/stable/library.h")
    message(FATAL_ERROR "kiln: torch ${KILN_TORCH_VERSION} has no stable-ABI headers (${include_dir}/torch/csrc/stable)")
  endif()
  kiln_torch_version_hex("${KILN_STABLE_TORCH_MIN}" target_version)

  add_library(kiln_torch_stable INTERFACE)
  add_library(kiln::torch_stable ALIAS kiln_torch_stable)
  target_include_directories(kiln_torch_stable SYSTEM INTERFACE "${include_dir}")
  target_compile_definitions(kiln_torch_stable INTERFACE
    TORCH_STABLE_ONLY
    "TORCH_TARGET_VERSION=${target_version}"
    KILN_STABLE_ABI=1)
  target_link_libraries(kiln_torch_stable INTERFACE "${lib}")
  if(KILN_WITH_CUDA)
    if(NOT TARGET CUDA::cudart)
      find_package(CUDAToolkit REQUIRED GLOBAL)
    endif()
    kiln_add_cuda_library_headers()
    target_link_libraries(kiln_torch_stable INTERFACE CUDA::cudart kiln::cuda_library_headers)
    target_compile_definitions(kiln_torch_stable INTERFACE KILN_WITH_CUDA=1)
  endif()
  message(STATUS "kiln: stable ABI: TORCH_TARGET_VERSION=${target_version} (torch >= ${KILN_STABLE_TORCH_MIN}), "
                 "headers of torch ${KILN_TORCH_VERSION}, linked to libtorch_cpu only")
endfunction()
