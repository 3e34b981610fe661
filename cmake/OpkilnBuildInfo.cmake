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
      --cuda "${OPKILN_TORCH_CUDA}"
      --nvcc-version "${CMAKE_CUDA_COMPILER_VERSION}"
      --cuda-archs "${_archs}"
      --cuda-flags "${CMAKE_CUDA_FLAGS} ${CMAKE_CUDA_FLAGS_RELEASE} ${_cmake_archs}")
  endif()
  set(suffix "${Python_SOABI}")
  set(stable_args "")
  if(OPKILN_ABI_MODE STREQUAL "stable")
    set(suffix "${Python_SOSABI}")
    list(APPEND stable_args --torch-min "${OPKILN_STABLE_TORCH_MIN}")
  endif()
  execute_process(
    COMMAND "${CMAKE_COMMAND}" -E env "PYTHONPATH=${OPKILN_SOURCE_DIR}/scripts"
            "${Python_EXECUTABLE}" -m kiln_tool.build_info
            --output "${out}"
            --source-dir "${OPKILN_SOURCE_DIR}"
            --version "${OPKILN_WHEEL_VERSION}"
            --torch-version "${OPKILN_TORCH_VERSION}"
            --abi-mode "${OPKILN_ABI_MODE}"
            --cxx11-abi "${OPKILN_TORCH_CXX11_ABI}"
            --cxx-standard "${OPKILN_TORCH_CXX_STANDARD}"
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
endfunction()
