# What every build of opkiln._C shares, in either ABI mode (ops/CMakeLists.txt): language standards, CUDA
# options, the arch list for the unsupported-GPU error, the $ORIGIN-relative
# RUNPATH, the hardening of cmake/OpkilnHardening.cmake and the install rule.
#
# opkiln_finish_extension(<target> ARCH_CHECK_SOURCE <path to arch_check.cu>)
function(opkiln_finish_extension target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "ARCH_CHECK_SOURCE" "")
  target_compile_features(${target} PRIVATE cxx_std_${OPKILN_TORCH_CXX_STANDARD})
  set_target_properties(${target} PROPERTIES CXX_EXTENSIONS OFF CUDA_EXTENSIONS OFF)
  target_compile_options(${target} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:-Wall;-Wextra>")

  set(runpath "$ORIGIN" "$ORIGIN/../torch/lib")
  if(OPKILN_WITH_CUDA)
    set_target_properties(${target} PROPERTIES
      CUDA_STANDARD ${OPKILN_TORCH_CXX_STANDARD} CUDA_STANDARD_REQUIRED ON)
    # Compressed fatbins; no -lineinfo in release builds (it embeds absolute paths).
    target_compile_options(${target} PRIVATE
      "$<$<COMPILE_LANGUAGE:CUDA>:${OPKILN_CUDA_COMPRESS_FLAGS};--expt-relaxed-constexpr>")
    # nvcc names anonymous namespaces and internal-linkage entities (ours and those
    # in CCCL's headers) after a hash of the source's absolute path, so the same
    # sources in another checkout would give another fatbin. Hash a path relative
    # to the source tree instead: reproducible wherever the checkout lies.
    get_target_property(target_sources ${target} SOURCES)
    foreach(source IN LISTS target_sources)
      if(source MATCHES "\\.cu$")
        get_filename_component(absolute "${source}" ABSOLUTE)
        file(RELATIVE_PATH relative "${OPKILN_SOURCE_DIR}" "${absolute}")
        set_property(SOURCE "${source}" APPEND PROPERTY COMPILE_OPTIONS
          "-Xcudafe=--orig_src_path_name=${relative}")
      endif()
    endforeach()
    if(arg_ARCH_CHECK_SOURCE)
      # The arch list, for the error an unsupported GPU gets (commas: a ';' would split the definition).
      string(REPLACE ";" "," arch_list_text "${OPKILN_CUDA_ARCH_LIST}")
      set_source_files_properties("${arg_ARCH_CHECK_SOURCE}" TARGET_DIRECTORY ${target} PROPERTIES
        COMPILE_DEFINITIONS "OPKILN_CUDA_ARCH_LIST=\"${arch_list_text}\"")
    endif()
    # Where torch's CUDA runtime wheels put libcudart: nvidia/cu13/lib from CUDA 13,
    # nvidia/cuda_runtime/lib before. torch has loaded it already; this is the fallback.
    string(REGEX MATCH "^[0-9]+" cuda_major "${OPKILN_TORCH_CUDA}")
    if(cuda_major GREATER_EQUAL 13)
      list(APPEND runpath "$ORIGIN/../nvidia/cu${cuda_major}/lib")
    else()
      list(APPEND runpath "$ORIGIN/../nvidia/cuda_runtime/lib")
    endif()
  endif()
  opkiln_harden(${target} VERSION_SCRIPT "${OPKILN_SOURCE_DIR}/ops/opkiln.map" RUNPATH ${runpath})
  install(TARGETS ${target} LIBRARY DESTINATION opkiln)
endfunction()
