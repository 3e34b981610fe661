# kiln's CMake package: find_package(Kiln CONFIG REQUIRED), before project() (docs/cmake-api.md).
#
# Found through `kiln --cmake-dir` (-DKiln_DIR=...), the cmake.prefix entry point of the torch-kiln
# distribution (scikit-build-core) or `kiln wheels`, which sets Kiln_DIR for the builds it drives.
# It must work before project(): a CUDA build pins its compiler and architectures before the CUDA
# language is enabled (kiln_configure()). So nothing here depends on a language or on the processor.
#
# This folder is kiln_tool/cmake inside the torch-kiln wheel, and cmake/ at the top of a checkout beside
# src/kiln_tool: either way the kiln_tool package it belongs to is found from here.
#
# Sets:
#   KILN_CMAKE_DIR    this folder
#   KILN_PACKAGE_DIR  the kiln_tool package of this CMake package (its guard, its data)
#   KILN_PYTHONPATH   a folder of the build tree that holds only kiln_tool (a link to KILN_PACKAGE_DIR):
#                     every Python call of kiln's CMake runs `python -m kiln_tool.<module>` with
#                     PYTHONPATH set to it. Not the folder kiln_tool is installed in: that is the tool's
#                     venv's whole site-packages, whose torch would shadow the build venv's.
#   KILN_DATA_DIR     kiln's data (matrix.json: the default CUDA arch lists)
# and defines the kiln_* functions of the modules below.

if(CMAKE_VERSION VERSION_LESS 3.26)
  message(FATAL_ERROR "kiln: CMake >= 3.26 is required (C++20 in CUDA sources), this is CMake ${CMAKE_VERSION}")
endif()

get_filename_component(KILN_CMAKE_DIR "${CMAKE_CURRENT_LIST_DIR}" ABSOLUTE)
get_filename_component(_kiln_parent "${KILN_CMAKE_DIR}/.." ABSOLUTE)
get_filename_component(_kiln_parent_name "${_kiln_parent}" NAME)
if(_kiln_parent_name STREQUAL "kiln_tool" AND EXISTS "${_kiln_parent}/__init__.py")
  set(KILN_PACKAGE_DIR "${_kiln_parent}")
elseif(EXISTS "${_kiln_parent}/src/kiln_tool/__init__.py")
  set(KILN_PACKAGE_DIR "${_kiln_parent}/src/kiln_tool")
else()
  message(FATAL_ERROR "kiln: no kiln_tool package beside this CMake package (${KILN_CMAKE_DIR}): use the one "
                      "`kiln --cmake-dir` prints")
endif()
set(KILN_DATA_DIR "${KILN_PACKAGE_DIR}/data")
set(KILN_PYTHONPATH "${CMAKE_BINARY_DIR}/kiln-path")
file(MAKE_DIRECTORY "${KILN_PYTHONPATH}")
if(IS_SYMLINK "${KILN_PYTHONPATH}/kiln_tool")
  file(READ_SYMLINK "${KILN_PYTHONPATH}/kiln_tool" _kiln_linked)
  if(NOT _kiln_linked STREQUAL KILN_PACKAGE_DIR)  # a rebuild by another kiln
    file(REMOVE "${KILN_PYTHONPATH}/kiln_tool")
  endif()
elseif(EXISTS "${KILN_PYTHONPATH}/kiln_tool")
  file(REMOVE_RECURSE "${KILN_PYTHONPATH}/kiln_tool")
endif()
if(NOT IS_SYMLINK "${KILN_PYTHONPATH}/kiln_tool")
  file(CREATE_LINK "${KILN_PACKAGE_DIR}" "${KILN_PYTHONPATH}/kiln_tool" RESULT _kiln_link SYMBOLIC)
  if(NOT _kiln_link EQUAL 0)
    message(FATAL_ERROR "kiln: cannot link ${KILN_PYTHONPATH}/kiln_tool to ${KILN_PACKAGE_DIR}: ${_kiln_link}")
  endif()
endif()
unset(_kiln_linked)
unset(_kiln_link)

include("${KILN_CMAKE_DIR}/KilnPython.cmake")
include("${KILN_CMAKE_DIR}/KilnTorch.cmake")
include("${KILN_CMAKE_DIR}/KilnCuda.cmake")
include("${KILN_CMAKE_DIR}/KilnHardening.cmake")
include("${KILN_CMAKE_DIR}/KilnStableAbi.cmake")
include("${KILN_CMAKE_DIR}/KilnBuildInfo.cmake")
include("${KILN_CMAKE_DIR}/KilnLibrary.cmake")
