# Hardened, relocatable shared objects. Everything is a property of the target
# it applies to; nothing here touches global flags.

# opkiln_harden(<target> VERSION_SCRIPT <file> RUNPATH <entries...>)
#   - position-independent code, hidden visibility (C++ and CUDA, inline functions too)
#   - a linker version script: only what it lists is exported
#   - -z text (refuse text relocations), -z noexecstack, -z relro -z now,
#     --exclude-libs,ALL (no re-export of static archives), --as-needed
#   - RUNPATH (not RPATH) made only of $ORIGIN-relative entries, also in the build tree
#   - build and source paths mapped out of debug info and __FILE__
function(opkiln_harden target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "VERSION_SCRIPT" "RUNPATH")
  if(NOT arg_VERSION_SCRIPT)
    message(FATAL_ERROR "opkiln_harden(${target}): VERSION_SCRIPT is required")
  endif()
  foreach(entry IN LISTS arg_RUNPATH)
    if(NOT entry MATCHES "^\\$ORIGIN(/|$)")
      message(FATAL_ERROR "opkiln_harden(${target}): RUNPATH entry '${entry}' is not $ORIGIN-relative")
    endif()
  endforeach()
  set_target_properties(${target} PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    BUILD_WITH_INSTALL_RPATH ON
    INSTALL_RPATH "${arg_RUNPATH}"
    LINK_DEPENDS "${arg_VERSION_SCRIPT}")
  target_link_options(${target} PRIVATE
    "LINKER:--version-script=${arg_VERSION_SCRIPT}"
    "LINKER:-z,text"
    "LINKER:-z,noexecstack"
    "LINKER:-z,relro"
    "LINKER:-z,now"
    "LINKER:--exclude-libs,ALL"
    "LINKER:--as-needed"
    "LINKER:--enable-new-dtags"
    "LINKER:--build-id=sha1")
  set(host_maps "-ffile-prefix-map=${CMAKE_BINARY_DIR}/=build/")
  if(KILN_TORCH_ROOT)
    # torch's headers name themselves in __FILE__ (TORCH_CHECK, c10 macros): torch/..., not the build venv.
    list(APPEND host_maps "-ffile-prefix-map=${KILN_TORCH_ROOT}/=torch/")
  endif()
  opkiln_harden_compile(${target} PREFIX_MAPS ${host_maps})
endfunction()

# opkiln_harden_compile(<target> [PREFIX_MAPS <-ffile-prefix-map=...>...])
#   The compile-side half of opkiln_harden, for object libraries too: position-independent code,
#   hidden visibility, the source tree mapped out of __FILE__ and debug info (plus PREFIX_MAPS).
function(opkiln_harden_compile target)
  cmake_parse_arguments(PARSE_ARGV 1 arg "" "" "PREFIX_MAPS")
  set_target_properties(${target} PROPERTIES
    POSITION_INDEPENDENT_CODE ON
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    CUDA_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON)
  set(host_maps "-ffile-prefix-map=${KILN_SOURCE_DIR}/=opkiln/" ${arg_PREFIX_MAPS})
  target_compile_options(${target} PRIVATE
    "$<$<COMPILE_LANGUAGE:CXX>:${host_maps}>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=$<JOIN:${host_maps},,>>")
endfunction()
