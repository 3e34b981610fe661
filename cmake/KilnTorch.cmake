# The project and the torch it builds against, found before project(); the torch targets, after it.
#
# torch's own TorchConfig.cmake is not used: it rewrites the CUDA architecture
# list, links libtorch_cuda with --no-as-needed even for CPU code, and leaves
# *-NOTFOUND entries behind. kiln_tool.build_config reads the facts from disk
# (it never imports torch) and decides the variant; here we define small
# interface targets that link only what a variant needs.
include_guard(GLOBAL)

# kiln_configure()
#   Before project(). Reads the project's [tool.kiln] table (KILN_PROJECT_DIR, default
#   CMAKE_SOURCE_DIR) and the torch beside Python_EXECUTABLE (python -m kiln_tool.build_config), and
#   sets in the caller's scope:
#     KILN_PROJECT_NAME, KILN_PACKAGE, KILN_NAMESPACE, KILN_LIBRARIES   the project's table
#     KILN_TORCH_ROOT, KILN_TORCH_VERSION, KILN_TORCH_PUBLIC_VERSION, KILN_TORCH_MAJOR_MINOR,
#     KILN_TORCH_CUDA, KILN_TORCH_INCLUDE_DIRS, KILN_TORCH_LIB_DIR, KILN_TORCH_CXX11_ABI,
#     KILN_TORCH_CXX_STANDARD                                          the torch
#     KILN_WITH_CUDA (ON/OFF), KILN_VARIANT_TAG (cpu, cu130), KILN_ABI_MODE (torch, stable),
#     KILN_WHEEL_VERSION, KILN_STABLE_TORCH_MIN                        the variant
#     KILN_MATRIX_FILE                                                 where CUDA arch lists come from
#     KILN_LANGUAGES                                                   CXX, plus CUDA in a CUDA variant
#   and, in a CUDA variant, pins the CUDA compiler and architectures (kiln_setup_cuda()).
#   Then: project(<name> LANGUAGES ${KILN_LANGUAGES}).
macro(kiln_configure)
  if(DEFINED CMAKE_CUDA_COMPILER_LOADED OR DEFINED CMAKE_CXX_COMPILER_LOADED)
    message(FATAL_ERROR "kiln_configure() must come before project(): a CUDA build pins its compiler and "
                        "architectures before the CUDA language is enabled")
  endif()
  # A build from the sdist on a user's machine: a missing compiler is one line saying what to install, not
  # project()'s page about CMAKE_CXX_COMPILER. Searched as project() searches (CXX, then PATH and system dirs).
  if(NOT CMAKE_CXX_COMPILER AND "$ENV{CXX}" STREQUAL "")
    find_program(KILN_FOUND_CXX NAMES c++ g++ clang++ CC)
    if(NOT KILN_FOUND_CXX)
      message(FATAL_ERROR "kiln: no C++ compiler found (CXX unset; no c++, g++ or clang++ on PATH): install one "
                          "(apt-get install g++ | dnf install gcc-c++ | conda install gxx) or set CXX")
    endif()
  elseif(NOT CMAKE_CXX_COMPILER)
    # CXX may carry flags after the compiler ("g++ -m64"), as project() reads it.
    separate_arguments(_kiln_cxx_words UNIX_COMMAND "$ENV{CXX}")
    list(GET _kiln_cxx_words 0 _kiln_cxx)
    find_program(KILN_FOUND_ENV_CXX NAMES "${_kiln_cxx}" NO_CACHE)
    if(NOT KILN_FOUND_ENV_CXX)
      message(FATAL_ERROR "kiln: CXX=$ENV{CXX} names no compiler on this machine: install one (apt-get install "
                          "g++ | dnf install gcc-c++ | conda install gxx) and point CXX at it, or unset CXX")
    endif()
  endif()
  if(NOT KILN_PROJECT_DIR)
    set(KILN_PROJECT_DIR "${CMAKE_SOURCE_DIR}")
  endif()
  get_filename_component(KILN_PROJECT_DIR "${KILN_PROJECT_DIR}" ABSOLUTE BASE_DIR "${CMAKE_SOURCE_DIR}")
  kiln_run_python(build_config "reading the project ${KILN_PROJECT_DIR} and the torch beside ${Python_EXECUTABLE}"
    ARGS --format cmake --project-dir "${KILN_PROJECT_DIR}"
    OUTPUT_VARIABLE _kiln_config)
  file(WRITE "${CMAKE_BINARY_DIR}/kiln_config.cmake" "${_kiln_config}")
  include("${CMAKE_BINARY_DIR}/kiln_config.cmake")
  foreach(_kiln_var KILN_PROJECT_NAME KILN_PACKAGE KILN_NAMESPACE KILN_LIBRARIES KILN_TORCH_ROOT
                    KILN_TORCH_VERSION KILN_TORCH_LIB_DIR KILN_TORCH_INCLUDE_DIRS KILN_TORCH_CXX11_ABI
                    KILN_TORCH_CXX_STANDARD KILN_WITH_CUDA KILN_VARIANT_TAG KILN_ABI_MODE KILN_WHEEL_VERSION)
    if(NOT DEFINED ${_kiln_var})
      message(FATAL_ERROR "kiln: python -m kiln_tool.build_config set no ${_kiln_var}: the kiln_tool in "
                          "${KILN_PYTHONPATH} does not match this CMake package (${KILN_CMAKE_DIR})")
    endif()
  endforeach()
  if(NOT KILN_MATRIX_FILE)
    set(KILN_MATRIX_FILE "${KILN_DATA_DIR}/matrix.json")
  endif()
  set_property(GLOBAL PROPERTY KILN_CONFIGURE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  message(STATUS "kiln: ${KILN_PROJECT_NAME} ${KILN_WHEEL_VERSION} (package ${KILN_PACKAGE}, torch.ops.${KILN_NAMESPACE}, "
                 "${KILN_LIBRARIES}): torch ${KILN_TORCH_VERSION} (C++${KILN_TORCH_CXX_STANDARD}, "
                 "_GLIBCXX_USE_CXX11_ABI=${KILN_TORCH_CXX11_ABI}), kernels ${KILN_VARIANT_TAG}, ${KILN_ABI_MODE} ABI")
  set(KILN_LANGUAGES CXX)
  if(KILN_WITH_CUDA)
    kiln_setup_cuda()
    list(APPEND KILN_LANGUAGES CUDA)
  endif()
endmacro()

function(_kiln_require_configured what)
  if(NOT DEFINED KILN_WITH_CUDA OR NOT KILN_TORCH_LIB_DIR)
    message(FATAL_ERROR "${what}: call kiln_configure() before project() first")
  endif()
  if(KILN_WITH_CUDA AND NOT CMAKE_CUDA_COMPILER_LOADED)
    message(FATAL_ERROR "${what}: a CUDA variant needs the CUDA language: project(<name> LANGUAGES \${KILN_LANGUAGES})")
  endif()
endfunction()

# kiln_add_torch_targets()
#   After project(); kiln_add_torch_library() calls it. Defines, once:
#   torch ABI mode:
#     kiln::torch_cpu    torch's headers, _GLIBCXX_USE_CXX11_ABI, libtorch_cpu + libc10
#     kiln::torch_cuda   (CUDA variant) kiln::torch_cpu + libc10_cuda + the CUDA runtime + the CUDA
#                        library headers torch ships (kiln::cuda_library_headers), KILN_WITH_CUDA=1
#   stable ABI mode:
#     kiln::torch_stable (KilnStableAbi.cmake) torch's headers with TORCH_STABLE_ONLY, libtorch_cpu only
function(kiln_add_torch_targets)
  _kiln_require_configured("kiln_add_torch_targets()")
  if(KILN_WITH_CUDA AND NOT TARGET CUDA::cudart)
    find_package(CUDAToolkit REQUIRED GLOBAL)
  endif()
  if(KILN_ABI_MODE STREQUAL "stable")
    kiln_add_stable_torch_target()
    return()
  endif()
  if(TARGET kiln::torch_cpu)
    return()
  endif()
  set(lib "${KILN_TORCH_LIB_DIR}")
  foreach(name c10 torch_cpu)
    if(NOT EXISTS "${lib}/lib${name}.so")
      message(FATAL_ERROR "kiln: ${lib}/lib${name}.so is missing")
    endif()
  endforeach()
  add_library(kiln_torch_cpu INTERFACE)
  add_library(kiln::torch_cpu ALIAS kiln_torch_cpu)
  target_include_directories(kiln_torch_cpu SYSTEM INTERFACE ${KILN_TORCH_INCLUDE_DIRS})
  target_compile_definitions(kiln_torch_cpu INTERFACE _GLIBCXX_USE_CXX11_ABI=${KILN_TORCH_CXX11_ABI})
  target_link_libraries(kiln_torch_cpu INTERFACE "${lib}/libtorch_cpu.so" "${lib}/libc10.so")

  if(KILN_WITH_CUDA)
    if(NOT EXISTS "${lib}/libc10_cuda.so")
      message(FATAL_ERROR "kiln: a CUDA build needs ${lib}/libc10_cuda.so; torch ${KILN_TORCH_VERSION} has none")
    endif()
    add_library(kiln_torch_cuda INTERFACE)
    add_library(kiln::torch_cuda ALIAS kiln_torch_cuda)
    kiln_add_cuda_library_headers()
    target_link_libraries(kiln_torch_cuda INTERFACE kiln::torch_cpu "${lib}/libc10_cuda.so" CUDA::cudart
                                                    kiln::cuda_library_headers)
    target_compile_definitions(kiln_torch_cuda INTERFACE KILN_WITH_CUDA=1)
  endif()
endfunction()
