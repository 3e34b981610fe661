# Build info shipped inside the wheel (opkiln/_build_info.json), read by
# opkiln.build_info(), the import preflight, `python -m opkiln doctor` and
# `kiln audit`. It records no absolute path and no time stamp.
function(opkiln_write_build_info target)
  set(out "${CMAKE_BINARY_DIR}/_build_info.json")
  set(cuda_args "")
  if(OPKILN_WITH_CUDA)
    # Lists joined with spaces: a ";" would split them into separate arguments.
    list(JOIN OPKILN_CUDA_ARCH_LIST " " _archs)
    list(JOIN CMAKE_CUDA_ARCHITECTURES " " _cmake_archs)
    list(APPEND cuda_args
      --cuda "${KILN_TORCH_CUDA}"
      --nvcc-version "${CMAKE_CUDA_COMPILER_VERSION}"
      --cuda-archs "${_archs}"
      --cuda-flags "${CMAKE_CUDA_FLAGS} ${CMAKE_CUDA_FLAGS_RELEASE} ${_cmake_archs}")
  endif()
  set(suffix "${Python_SOABI}")
  set(stable_args "")
  if(KILN_ABI_MODE STREQUAL "stable")
    set(suffix "${Python_SOSABI}")
    list(APPEND stable_args --torch-min "${KILN_STABLE_TORCH_MIN}")
  endif()
  # The op manifest: the ops ops/CMakeLists.txt found (KILN_OPS), each one's schemas.
  list(JOIN KILN_OPS " " _ops)
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${KILN_SOURCE_DIR}/src"
            "${Python_EXECUTABLE}" -m kiln_tool.build_info
            --output "${out}"
            --ops "${_ops}"
            --source-dir "${KILN_SOURCE_DIR}"
            --version "${KILN_WHEEL_VERSION}"
            --torch-version "${KILN_TORCH_VERSION}"
            --abi-mode "${KILN_ABI_MODE}"
            --cxx11-abi "${KILN_TORCH_CXX11_ABI}"
            --cxx-standard "${KILN_TORCH_CXX_STANDARD}"
            --compiler "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}"
            --cxx-flags "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_RELEASE}"
            --cmake-version "${CMAKE_VERSION}"
            --extension-suffix "${suffix}"
            ${stable_args}
            ${cuda_args}
    RESULT_VARIABLE rc
    ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "opkiln: writing build info failed:\n${err}")
  endif()
  install(FILES "${out}" DESTINATION opkiln)
  opkiln_write_sbom("${out}")
endfunction()

# CycloneDX SBOM of the toolchain, into the wheel's .dist-info/sboms/.
function(opkiln_write_sbom build_info)
  set(sbom "${CMAKE_BINARY_DIR}/opkiln.cdx.json")
  execute_process(COMMAND "${CMAKE_MAKE_PROGRAM}" --version OUTPUT_VARIABLE ninja_version
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(nvcc_version "")
  if(OPKILN_WITH_CUDA)
    set(nvcc_version "${CMAKE_CUDA_COMPILER_VERSION}")
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${KILN_SOURCE_DIR}/src"
            "${Python_EXECUTABLE}" -m kiln_tool.sbom
            --build-info "${build_info}"
            --output "${sbom}"
            --compiler "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}"
            "--nvcc-version=${nvcc_version}"
            --cmake-version "${CMAKE_VERSION}"
            "--ninja-version=${ninja_version}"
            "--scikit-build-core-version=${SKBUILD_CORE_VERSION}"
    RESULT_VARIABLE rc
    ERROR_VARIABLE err)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "opkiln: writing the SBOM failed:\n${err}")
  endif()
  if(NOT SKBUILD_METADATA_DIR)
    message(FATAL_ERROR "opkiln: SKBUILD_METADATA_DIR is not set; build through scikit-build-core")
  endif()
  install(FILES "${sbom}" DESTINATION "${SKBUILD_METADATA_DIR}/sboms")
endfunction()
