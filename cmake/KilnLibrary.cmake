# Torch op libraries: what every library kiln builds shares (language standards, CUDA options, the
# $ORIGIN-relative RUNPATH, the hardening of KilnHardening.cmake, the install rule into the project's
# package and the build info of the whole package), and the kernel-core object libraries.
include_guard(GLOBAL)

# kiln_add_torch_library(<target> [PYTHON_MODULE | LOAD_LIBRARY] [STABLE_ABI]
#                        SOURCES <file>... [CUDA_SOURCES <file>...] [SCHEMA_SOURCES <file>...]
#                        [DESTINATION <dir>] [EXPORTS <symbol>...] [RUNPATH <entry>...])
#   PYTHON_MODULE: a Python extension module <target><suffix> (python_add_library WITH_SOABI; USE_SABI
#     3.10 in stable mode) exporting PyInit_<target> only. LOAD_LIBRARY: <target>.so for
#     torch.ops.load_library, exporting nothing. Neither: the project's tool.kiln.libraries.
#   STABLE_ABI: the sources use the LibTorch stable ABI only: kiln::torch_stable in either ABI mode.
#     Without it, the library follows KILN_ABI_MODE: kiln::torch_stable in stable mode, else
#     kiln::torch_cuda (CUDA variant) or kiln::torch_cpu.
#   CUDA_SOURCES: compiled in a CUDA variant only (they may include torch's headers).
#   SCHEMA_SOURCES: the files whose m.def(...) give the op manifest (default: SOURCES).
#   DESTINATION: where it installs, relative to the wheel's root (default: KILN_PACKAGE); RUNPATH is
#     computed from its depth: $ORIGIN, torch/lib and, in a CUDA variant, the CUDA runtime wheel's lib.
#   EXPORTS: more symbols to export; RUNPATH: more $ORIGIN-relative entries.
#   The first call schedules kiln_write_build_info() for the end of the directory that called
#   kiln_configure() (cmake_language(DEFER)), unless the project calls it itself.
function(kiln_add_torch_library target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "PYTHON_MODULE;LOAD_LIBRARY;STABLE_ABI" "DESTINATION"
                        "SOURCES;CUDA_SOURCES;SCHEMA_SOURCES;EXPORTS;RUNPATH")
  set(what "kiln_add_torch_library(${target})")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${what}: unexpected arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(arg_PYTHON_MODULE AND arg_LOAD_LIBRARY)
    message(FATAL_ERROR "${what}: PYTHON_MODULE and LOAD_LIBRARY exclude each other")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "${what}: SOURCES is required")
  endif()
  _kiln_require_configured("${what}")
  get_property(written GLOBAL PROPERTY KILN_BUILD_INFO_WRITTEN)
  if(written)
    message(FATAL_ERROR "${what}: the build info was already written (kiln_write_build_info()); add every library before it")
  endif()
  if(arg_PYTHON_MODULE)
    set(kind python-module)
  elseif(arg_LOAD_LIBRARY)
    set(kind load-library)
  elseif(KILN_LIBRARIES MATCHES "^(python-module|load-library)$")
    set(kind "${KILN_LIBRARIES}")
  else()
    message(FATAL_ERROR "${what}: neither PYTHON_MODULE nor LOAD_LIBRARY, and tool.kiln.libraries is '${KILN_LIBRARIES}'")
  endif()
  set(destination "${KILN_PACKAGE}")
  if(DEFINED arg_DESTINATION)
    set(destination "${arg_DESTINATION}")
  endif()
  if(destination STREQUAL "" OR IS_ABSOLUTE "${destination}" OR destination MATCHES "(^|/)\\.\\.?(/|$)")
    message(FATAL_ERROR "${what}: DESTINATION '${destination}' is not a folder inside the wheel (relative, no . or ..)")
  endif()

  kiln_add_torch_targets()
  if(arg_STABLE_ABI OR KILN_ABI_MODE STREQUAL "stable")
    kiln_add_stable_torch_target()
    set(torch kiln::torch_stable)
  elseif(KILN_WITH_CUDA)
    set(torch kiln::torch_cuda)
  else()
    set(torch kiln::torch_cpu)
  endif()

  set(sources ${arg_SOURCES})
  if(KILN_WITH_CUDA)
    list(APPEND sources ${arg_CUDA_SOURCES})
  endif()
  set(exports ${arg_EXPORTS})
  if(kind STREQUAL "python-module")
    if(KILN_ABI_MODE STREQUAL "stable")
      find_package(Python REQUIRED COMPONENTS Interpreter Development.Module Development.SABIModule)
      python_add_library(${target} MODULE WITH_SOABI USE_SABI 3.10 ${sources})
      set(suffix "${Python_SOSABI}")
    else()
      find_package(Python REQUIRED COMPONENTS Interpreter Development.Module)
      python_add_library(${target} MODULE WITH_SOABI ${sources})
      set(suffix "${Python_SOABI}")
    endif()
    set_property(GLOBAL PROPERTY KILN_EXTENSION_SUFFIX "${suffix}")
    # The module's init: PyMODINIT_FUNC PyInit_<target>(void) in the sources.
    list(PREPEND exports "PyInit_${target}")
  else()
    add_library(${target} MODULE ${sources})
    set_target_properties(${target} PROPERTIES PREFIX "" SUFFIX ".so")
  endif()
  target_link_libraries(${target} PRIVATE ${torch})
  _kiln_language_options(${target} ${KILN_TORCH_CXX_STANDARD})

  # RUNPATH from where it is installed: site-packages/<destination>/ -> site-packages/torch/lib, and
  # the CUDA runtime wheel's lib (nvidia/cu13/lib from CUDA 13, nvidia/cuda_runtime/lib before; torch
  # has loaded it already, this is the fallback).
  string(REGEX REPLACE "[^/]+" ".." up "${destination}")
  set(runpath "$ORIGIN" "$ORIGIN/${up}/torch/lib")
  if(KILN_WITH_CUDA)
    string(REGEX MATCH "^[0-9]+" cuda_major "${KILN_TORCH_CUDA}")
    if(cuda_major GREATER_EQUAL 13)
      list(APPEND runpath "$ORIGIN/${up}/nvidia/cu${cuda_major}/lib")
    else()
      list(APPEND runpath "$ORIGIN/${up}/nvidia/cuda_runtime/lib")
    endif()
  endif()
  list(APPEND runpath ${arg_RUNPATH})
  kiln_harden(${target} EXPORTS ${exports} RUNPATH ${runpath})
  install(TARGETS ${target} LIBRARY DESTINATION "${destination}")

  set(schema ${arg_SOURCES})
  if(arg_SCHEMA_SOURCES)
    set(schema ${arg_SCHEMA_SOURCES})
  endif()
  foreach(file IN LISTS schema)
    get_filename_component(file "${file}" ABSOLUTE)
    set_property(GLOBAL APPEND PROPERTY KILN_SCHEMA_SOURCES "${file}")
  endforeach()
  set_property(GLOBAL APPEND PROPERTY KILN_TORCH_LIBRARIES ${target})
  # What the import guard loads, in this order: <path in the wheel without suffix>=<kind>.
  set_property(GLOBAL APPEND PROPERTY KILN_LIBRARY_TARGETS "${destination}/${target}=${kind}")
  get_property(scheduled GLOBAL PROPERTY KILN_BUILD_INFO_SCHEDULED)
  if(NOT scheduled)
    get_property(root GLOBAL PROPERTY KILN_CONFIGURE_DIR)
    cmake_language(DEFER DIRECTORY "${root}" CALL _kiln_write_build_info_once)
    set_property(GLOBAL PROPERTY KILN_BUILD_INFO_SCHEDULED ON)
  endif()
  message(STATUS "kiln: ${target}: ${kind} linked to ${torch}, installed to ${destination}/")
endfunction()

function(_kiln_write_build_info_once)
  get_property(written GLOBAL PROPERTY KILN_BUILD_INFO_WRITTEN)
  if(NOT written)
    kiln_write_build_info()
  endif()
endfunction()

# kiln_add_kernel_objects(<target> SOURCES <file>... [CXX_STANDARD <n>])
#   Kernel cores as one OBJECT library compiled without torch's or Python's headers, definitions or
#   paths: its compile commands are the same for every torch and every CPython of one CUDA version,
#   so a compiler cache (ccache) serves a second wheel's cores from the first's. Link it into a
#   kiln_add_torch_library() target. C++ standard: CXX_STANDARD (default 20), never the torch's.
#   _GLIBCXX_USE_CXX11_ABI is the torch's (std::string and std::vector cross into the bindings). Same
#   hardening and CUDA options as the libraries (PIC, hidden visibility, prefix maps, compressed
#   fatbins, anonymous-namespace names hashed from project-relative paths). .cu files are compiled
#   in a CUDA variant; pass them only then (the CUDA language is not enabled otherwise).
function(kiln_add_kernel_objects target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "CXX_STANDARD" "SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kiln_add_kernel_objects(${target}): unexpected arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "kiln_add_kernel_objects(${target}): SOURCES is required")
  endif()
  _kiln_require_configured("kiln_add_kernel_objects(${target})")
  set(standard 20)
  if(arg_CXX_STANDARD)
    set(standard "${arg_CXX_STANDARD}")
  endif()
  add_library(${target} OBJECT ${arg_SOURCES})
  _kiln_language_options(${target} ${standard})
  target_compile_definitions(${target} PRIVATE _GLIBCXX_USE_CXX11_ABI=${KILN_TORCH_CXX11_ABI})
  kiln_harden_compile(${target})
endfunction()

# The C++/CUDA standard, warnings and CUDA options of the libraries and of the kernel objects alike.
function(_kiln_language_options target standard)
  target_compile_features(${target} PRIVATE cxx_std_${standard})
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF CUDA_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>")
  if(KILN_WITH_CUDA)
    set_target_properties(${target} PROPERTIES CUDA_STANDARD ${standard} CUDA_STANDARD_REQUIRED ON)
    # Compressed fatbins; no -lineinfo in release builds (it embeds absolute paths).
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CUDA>:${KILN_CUDA_COMPRESS_FLAGS};--expt-relaxed-constexpr>")
    kiln_cuda_source_paths(${target})
  endif()
endfunction()

# kiln_cuda_source_paths(<target>)
#   nvcc names anonymous namespaces and internal-linkage entities (the project's and those in CCCL's
#   headers) after a hash of the source's absolute path, so the same sources in another checkout would
#   give another fatbin. Each .cu source of <target> (those it has now) hashes its path relative to
#   KILN_PROJECT_DIR instead: reproducible wherever the project lies.
function(kiln_cuda_source_paths target)
  get_target_property(target_sources ${target} SOURCES)
  foreach(source IN LISTS target_sources)
    if(source MATCHES "\\.cu$")
      get_filename_component(absolute "${source}" ABSOLUTE)
      file(RELATIVE_PATH relative "${KILN_PROJECT_DIR}" "${absolute}")
      set_property(SOURCE "${source}" TARGET_DIRECTORY ${target} APPEND PROPERTY COMPILE_OPTIONS
        "-Xcudafe=--orig_src_path_name=${relative}")
    endif()
  endforeach()
endfunction()
