# Find exactly one torch: the one installed beside the Python that builds.
#
# torch's own TorchConfig.cmake is not used: it rewrites the CUDA architecture
# list, links libtorch_cuda with --no-as-needed even for CPU code, and leaves
# *-NOTFOUND entries behind. kiln_tool.build_config reads the facts from disk
# (it never imports torch) and decides the variant; here we define small
# interface targets that link only what a variant needs.

# Sets KILN_TORCH_* and the variant (OPKILN_WITH_CUDA, KILN_VARIANT_TAG,
# KILN_ABI_MODE, KILN_WHEEL_VERSION) in the caller's scope.
macro(opkiln_configure_from_torch)
  if(NOT Python_EXECUTABLE)
    message(FATAL_ERROR "opkiln: Python_EXECUTABLE is not set; build through scikit-build-core (pip wheel / python -m build)")
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${KILN_SOURCE_DIR}/src"
            "${Python_EXECUTABLE}" -m kiln_tool.build_config --format cmake
    OUTPUT_VARIABLE _opkiln_config
    ERROR_VARIABLE _opkiln_config_err
    RESULT_VARIABLE _opkiln_config_rc)
  if(NOT _opkiln_config_rc EQUAL 0)
    message(FATAL_ERROR "opkiln: cannot configure against torch for ${Python_EXECUTABLE}:\n${_opkiln_config_err}")
  endif()
  file(WRITE "${CMAKE_BINARY_DIR}/opkiln_config.cmake" "${_opkiln_config}")
  include("${CMAKE_BINARY_DIR}/opkiln_config.cmake")
  message(STATUS "opkiln: ${KILN_WHEEL_VERSION}: torch ${KILN_TORCH_VERSION} (C++${KILN_TORCH_CXX_STANDARD}, _GLIBCXX_USE_CXX11_ABI=${KILN_TORCH_CXX11_ABI}), kernels ${KILN_VARIANT_TAG}, ${KILN_ABI_MODE} ABI")
endmacro()

# opkiln::torch_cpu: headers, ABI flag, libc10 + libtorch_cpu.
# opkiln::torch_cuda: adds libc10_cuda and the CUDA runtime (CUDA variant only).
function(opkiln_add_torch_targets)
  set(lib "${KILN_TORCH_LIB_DIR}")
  foreach(name c10 torch_cpu)
    if(NOT EXISTS "${lib}/lib${name}.so")
      message(FATAL_ERROR "opkiln: ${lib}/lib${name}.so is missing")
    endif()
  endforeach()
  add_library(opkiln_torch_cpu INTERFACE)
  add_library(opkiln::torch_cpu ALIAS opkiln_torch_cpu)
  target_include_directories(opkiln_torch_cpu SYSTEM INTERFACE ${KILN_TORCH_INCLUDE_DIRS})
  target_compile_definitions(opkiln_torch_cpu INTERFACE _GLIBCXX_USE_CXX11_ABI=${KILN_TORCH_CXX11_ABI})
  target_link_libraries(opkiln_torch_cpu INTERFACE "${lib}/libtorch_cpu.so" "${lib}/libc10.so")

  if(OPKILN_WITH_CUDA)
    if(NOT EXISTS "${lib}/libc10_cuda.so")
      message(FATAL_ERROR "opkiln: a CUDA build needs ${lib}/libc10_cuda.so; torch ${KILN_TORCH_VERSION} has none")
    endif()
    add_library(opkiln_torch_cuda INTERFACE)
    add_library(opkiln::torch_cuda ALIAS opkiln_torch_cuda)
    target_link_libraries(opkiln_torch_cuda INTERFACE opkiln::torch_cpu "${lib}/libc10_cuda.so" CUDA::cudart)
    target_compile_definitions(opkiln_torch_cuda INTERFACE OPKILN_WITH_CUDA=1)
  endif()
endfunction()
