# What every build of opkiln._C shares, in either ABI mode (ops/CMakeLists.txt): language standards, CUDA
# options, the arch list for the unsupported-GPU error, the $ORIGIN-relative
# RUNPATH, the hardening of cmake/OpkilnHardening.cmake and the install rule.
#
# opkiln_finish_extension(<target> [ARCH_CHECK_SOURCE <path to arch_check.cu>])
function(opkiln_finish_extension target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "ARCH_CHECK_SOURCE" "")
  _opkiln_language_options(${target} ${KILN_TORCH_CXX_STANDARD} "${arg_ARCH_CHECK_SOURCE}")

  set(runpath "$ORIGIN" "$ORIGIN/../torch/lib")
  if(OPKILN_WITH_CUDA)
    # Where torch's CUDA runtime wheels put libcudart: nvidia/cu13/lib from CUDA 13,
    # nvidia/cuda_runtime/lib before. torch has loaded it already; this is the fallback.
    string(REGEX MATCH "^[0-9]+" cuda_major "${KILN_TORCH_CUDA}")
    if(cuda_major GREATER_EQUAL 13)
      list(APPEND runpath "$ORIGIN/../nvidia/cu${cuda_major}/lib")
    else()
      list(APPEND runpath "$ORIGIN/../nvidia/cuda_runtime/lib")
    endif()
  endif()
  opkiln_harden(${target} VERSION_SCRIPT "${KILN_SOURCE_DIR}/ops/opkiln.map" RUNPATH ${runpath})
  install(TARGETS ${target} LIBRARY DESTINATION opkiln)
endfunction()

# The C++/CUDA standard, warnings and CUDA options of the extension and of the kernel cores alike.
function(_opkiln_language_options target standard arch_check_source)
  target_compile_features(${target} PRIVATE cxx_std_${standard})
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF CUDA_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>")
  if(OPKILN_WITH_CUDA)
    set_target_properties(${target} PROPERTIES CUDA_STANDARD ${standard} CUDA_STANDARD_REQUIRED ON)
    # Compressed fatbins; no -lineinfo in release builds (it embeds absolute paths).
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CUDA>:${KILN_CUDA_COMPRESS_FLAGS};--expt-relaxed-constexpr>")
    _opkiln_cuda_sources_options(${target} "${arch_check_source}")
  endif()
endfunction()

# Per-source CUDA options of <target>'s .cu files.
function(_opkiln_cuda_sources_options target arch_check_source)
  # nvcc names anonymous namespaces and internal-linkage entities (ours and those
  # in CCCL's headers) after a hash of the source's absolute path, so the same
  # sources in another checkout would give another fatbin. Hash a path relative
  # to the source tree instead: reproducible wherever the checkout lies.
  get_target_property(target_sources ${target} SOURCES)
  foreach(source IN LISTS target_sources)
    if(source MATCHES "\\.cu$")
      get_filename_component(absolute "${source}" ABSOLUTE)
      file(RELATIVE_PATH relative "${KILN_SOURCE_DIR}" "${absolute}")
      set_property(SOURCE "${source}" TARGET_DIRECTORY ${target} APPEND PROPERTY COMPILE_OPTIONS
        "-Xcudafe=--orig_src_path_name=${relative}")
    endif()
  endforeach()
  if(arch_check_source)
    # The arch list, for the error an unsupported GPU gets (commas: a ';' would split the definition).
    string(REPLACE ";" "," arch_list_text "${OPKILN_CUDA_ARCH_LIST}")
    set_source_files_properties("${arch_check_source}" TARGET_DIRECTORY ${target} PROPERTIES
      COMPILE_DEFINITIONS "OPKILN_CUDA_ARCH_LIST=\"${arch_list_text}\"")
  endif()
endfunction()

# The C++ standard of the kernel cores: fixed, never the torch's (a torch that needs a newer one
# raises KILN_TORCH_CXX_STANDARD for the bindings only).
set(KILN_KERNEL_CXX_STANDARD 20)

# opkiln_add_kernel_cores(<target> SOURCES <files...> [ARCH_CHECK_SOURCE <path to arch_check.cu>])
#   The kernel cores (ops/<op>/*.cpp but binding.cpp, ops/<op>/*.cu, ops/common/*.cpp and *.cu) as one OBJECT
#   library compiled without torch's or Python's headers, definitions or paths: its compile commands
#   are the same for every torch and every CPython of one CUDA version, so a compiler cache (ccache)
#   serves a second wheel's kernel cores from the first's. Same hardening and CUDA options as the
#   extension (PIC, hidden visibility, compressed fatbins, relative anonymous-namespace hashing).
function(opkiln_add_kernel_cores target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "ARCH_CHECK_SOURCE" "SOURCES")
  add_library(${target} OBJECT ${arg_SOURCES})
  target_include_directories(${target} PRIVATE "${KILN_SOURCE_DIR}/ops")
  _opkiln_language_options(${target} ${KILN_KERNEL_CXX_STANDARD} "${arg_ARCH_CHECK_SOURCE}")
  # The one torch fact a core's objects must share with the bindings: std::string's and
  # std::vector's ABI across the boundary (1 for every torch this project builds).
  target_compile_definitions(${target} PRIVATE _GLIBCXX_USE_CXX11_ABI=${KILN_TORCH_CXX11_ABI})
  opkiln_harden_compile(${target})
endfunction()
