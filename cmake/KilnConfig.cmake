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
#   KILN_PYTHONPATH   the folder that holds the kiln_tool package: every Python call of kiln's CMake
#                     runs `python -m kiln_tool.<module>` with PYTHONPATH set to it
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
get_filename_component(KILN_PYTHONPATH "${KILN_PACKAGE_DIR}/.." ABSOLUTE)
set(KILN_DATA_DIR "${KILN_PACKAGE_DIR}/data")

include("${KILN_CMAKE_DIR}/KilnPython.cmake")
include("${KILN_CMAKE_DIR}/KilnTorch.cmake")
include("${KILN_CMAKE_DIR}/KilnCuda.cmake")
include("${KILN_CMAKE_DIR}/KilnHardening.cmake")
include("${KILN_CMAKE_DIR}/KilnStableAbi.cmake")
include("${KILN_CMAKE_DIR}/KilnBuildInfo.cmake")
include("${KILN_CMAKE_DIR}/KilnLibrary.cmake")
