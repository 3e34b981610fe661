# The LibTorch stable-ABI build (KILN_ABI_MODE=stable).
#
# One wheel per CUDA variant serves every torch from the floor
# (KILN_STABLE_TORCH_MIN, kiln_tool.build_metadata.STABLE_ABI_MIN_TORCH) on
# and every CPython >= 3.10:
#   - TORCH_STABLE_ONLY: any non-stable torch header is a compile error;
#   - TORCH_TARGET_VERSION = the floor: the stable headers then use only the
#     C-shim entry points that the floor's libtorch already exports;
#   - linked to libtorch_cpu only (the stable C shim), plus the CUDA runtime
#     for a CUDA build: no libc10, no libc10_cuda, no libtorch_cuda;
#   - Py_LIMITED_API 3.10 (python_add_library USE_SABI, in ops/CMakeLists.txt).

# "2.11" -> 0x20b000000000000 (TORCH_ABI_VERSION layout: major << 56 | minor << 48)
function(opkiln_torch_version_hex version out)
  if(NOT version MATCHES "^([0-9]+)\\.([0-9]+)")
    message(FATAL_ERROR "opkiln: '${version}' is not a torch version (expected e.g. 2.11)")
  endif()
  math(EXPR hex "(${CMAKE_MATCH_1} << 56) | (${CMAKE_MATCH_2} << 48)" OUTPUT_FORMAT HEXADECIMAL)
  set(${out} "${hex}" PARENT_SCOPE)
endfunction()

# opkiln::torch_stable: torch's include dir, the stable-only defines and libtorch_cpu.
function(opkiln_add_stable_torch_targets)
  if(NOT KILN_STABLE_TORCH_MIN)
    message(FATAL_ERROR "opkiln: KILN_STABLE_TORCH_MIN is not set (kiln_tool.build_config sets it)")
  endif()
  if(KILN_TORCH_PUBLIC_VERSION VERSION_LESS KILN_STABLE_TORCH_MIN)
    message(FATAL_ERROR "opkiln: a stable-ABI build needs torch >= ${KILN_STABLE_TORCH_MIN} headers, "
                        "this venv has torch ${KILN_TORCH_VERSION}")
  endif()
  set(lib "${KILN_TORCH_LIB_DIR}/libtorch_cpu.so")
  if(NOT EXISTS "${lib}")
    message(FATAL_ERROR "opkiln: ${lib} is missing")
  endif()
  list(GET KILN_TORCH_INCLUDE_DIRS 0 include_dir)
  if(NOT EXISTS "${include_dir}/torch/csrc/stable/library.h")
    message(FATAL_ERROR "opkiln: torch ${KILN_TORCH_VERSION} has no stable-ABI headers (${include_dir}/torch/csrc/stable)")
  endif()
  opkiln_torch_version_hex("${KILN_STABLE_TORCH_MIN}" target_version)
  set(KILN_TORCH_TARGET_VERSION "${target_version}" PARENT_SCOPE)

  add_library(opkiln_torch_stable INTERFACE)
  add_library(opkiln::torch_stable ALIAS opkiln_torch_stable)
  target_include_directories(opkiln_torch_stable SYSTEM INTERFACE "${include_dir}")
  target_compile_definitions(opkiln_torch_stable INTERFACE
    TORCH_STABLE_ONLY
    "TORCH_TARGET_VERSION=${target_version}")
  target_link_libraries(opkiln_torch_stable INTERFACE "${lib}")
  if(OPKILN_WITH_CUDA)
    target_link_libraries(opkiln_torch_stable INTERFACE CUDA::cudart)
    target_compile_definitions(opkiln_torch_stable INTERFACE OPKILN_WITH_CUDA=1)
  endif()
  message(STATUS "opkiln: stable ABI: TORCH_TARGET_VERSION=${target_version} (torch >= ${KILN_STABLE_TORCH_MIN}), "
                 "headers of torch ${KILN_TORCH_VERSION}, linked to libtorch_cpu only")
endfunction()
