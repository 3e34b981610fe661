# Build info shipped inside the wheel (<package>/_build_info.json), read by the package at import,
# by `kiln audit` and by people. It records no absolute path and no time stamp. Beside it, kiln's import
# guard (<package>/_kiln/: every .py of kiln_tool/guard, verbatim; docs/import-guard.md). Plus a
# CycloneDX SBOM of the toolchain, into the wheel's .dist-info/sboms/.
include_guard(GLOBAL)

# kiln_write_build_info([SCHEMA_SOURCES <file>...] [DESTINATION <dir>])
#   Writes the build info of the whole package once, at configure time (python -m kiln_tool.build_info),
#   and installs it to DESTINATION (default: KILN_PACKAGE), with the import guard in DESTINATION/_kiln/
#   (it loads the libraries of every kiln_add_torch_library(), recorded as the build info's
#   "targets"); writes the SBOM (python -m kiln_tool.sbom)
#   and installs it to scikit-build-core's metadata folder. The op manifest comes from the
#   SCHEMA_SOURCES of every kiln_add_torch_library() so far plus those given here.
#   kiln_add_torch_library() schedules a call for the end of the configure directory; a project
#   calls it itself only to write it earlier or with more schema sources.
function(kiln_write_build_info)
  cmake_parse_arguments(PARSE_ARGV 0 arg "" "DESTINATION" "SCHEMA_SOURCES")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "kiln_write_build_info(): unexpected arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  _kiln_require_configured("kiln_write_build_info()")
  get_property(written GLOBAL PROPERTY KILN_BUILD_INFO_WRITTEN)
  if(written)
    message(FATAL_ERROR "kiln_write_build_info(): the build info was written already")
  endif()
  get_property(schema GLOBAL PROPERTY KILN_SCHEMA_SOURCES)
  foreach(file IN LISTS arg_SCHEMA_SOURCES)
    get_filename_component(file "${file}" ABSOLUTE)
    list(APPEND schema "${file}")
  endforeach()
  list(REMOVE_DUPLICATES schema)
  if(NOT schema)
    message(FATAL_ERROR "kiln_write_build_info(): no schema sources (no kiln_add_torch_library() and no SCHEMA_SOURCES)")
  endif()
  set(destination "${KILN_PACKAGE}")
  if(arg_DESTINATION)
    set(destination "${arg_DESTINATION}")
  endif()

  set(out "${CMAKE_BINARY_DIR}/_build_info.json")
  set(cuda_args "")
  if(KILN_WITH_CUDA)
    # Lists joined with spaces: a ";" would split them into separate arguments.
    list(JOIN KILN_CUDA_ARCH_LIST " " archs)
    list(JOIN CMAKE_CUDA_ARCHITECTURES " " cmake_archs)
    list(APPEND cuda_args
      --cuda "${KILN_TORCH_CUDA}"
      --nvcc-version "${CMAKE_CUDA_COMPILER_VERSION}"
      --cuda-archs "${archs}"
      --cuda-flags "${CMAKE_CUDA_FLAGS} ${CMAKE_CUDA_FLAGS_RELEASE} ${cmake_archs}")
  endif()
  get_property(suffix GLOBAL PROPERTY KILN_EXTENSION_SUFFIX)
  get_property(targets GLOBAL PROPERTY KILN_LIBRARY_TARGETS)
  list(JOIN targets " " targets)
  set(stable_args "")
  if(KILN_ABI_MODE STREQUAL "stable")
    list(APPEND stable_args --torch-min "${KILN_STABLE_TORCH_MIN}")
  endif()
  kiln_run_python(build_info "writing the build info"
    ARGS --output "${out}"
         --source-dir "${KILN_PROJECT_DIR}"
         --schema-sources "${schema}"
         --version "${KILN_WHEEL_VERSION}"
         --torch-version "${KILN_TORCH_VERSION}"
         --abi-mode "${KILN_ABI_MODE}"
         --cxx11-abi "${KILN_TORCH_CXX11_ABI}"
         --cxx-standard "${KILN_TORCH_CXX_STANDARD}"
         --compiler "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}"
         --cxx-flags "${CMAKE_CXX_FLAGS} ${CMAKE_CXX_FLAGS_RELEASE}"
         --cmake-version "${CMAKE_VERSION}"
         "--extension-suffix=${suffix}"
         "--targets=${targets}"
         ${stable_args}
         ${cuda_args})
  install(FILES "${out}" DESTINATION "${destination}")
  # The import guard: generated into the package (not a runtime dependency), so it always reads the build
  # info format of the kiln that wrote it and needs nothing from an index.
  install(DIRECTORY "${KILN_PACKAGE_DIR}/guard/" DESTINATION "${destination}/_kiln"
          FILES_MATCHING PATTERN "*.py" PATTERN "__pycache__" EXCLUDE)
  set_property(GLOBAL PROPERTY KILN_BUILD_INFO_WRITTEN ON)
  kiln_write_sbom("${out}")
endfunction()

# kiln_write_sbom(<build info file>)
#   CycloneDX SBOM of the toolchain (<project>.cdx.json), installed into the wheel's .dist-info/sboms/
#   when scikit-build-core drives the build (SKBUILD_METADATA_DIR); written but not installed otherwise.
function(kiln_write_sbom build_info)
  set(sbom "${CMAKE_BINARY_DIR}/${KILN_PROJECT_NAME}.cdx.json")
  execute_process(COMMAND "${CMAKE_MAKE_PROGRAM}" --version OUTPUT_VARIABLE ninja_version
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(nvcc_version "")
  if(KILN_WITH_CUDA)
    set(nvcc_version "${CMAKE_CUDA_COMPILER_VERSION}")
  endif()
  kiln_run_python(sbom "writing the SBOM"
    ARGS --build-info "${build_info}"
         --output "${sbom}"
         --compiler "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}"
         "--nvcc-version=${nvcc_version}"
         --cmake-version "${CMAKE_VERSION}"
         "--ninja-version=${ninja_version}"
         "--scikit-build-core-version=${SKBUILD_CORE_VERSION}")
  if(SKBUILD_METADATA_DIR)
    install(FILES "${sbom}" DESTINATION "${SKBUILD_METADATA_DIR}/sboms")
  else()
    message(STATUS "kiln: not built by scikit-build-core: the SBOM ${sbom} is written, not installed")
  endif()
endfunction()
