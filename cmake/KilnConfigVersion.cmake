# The version of kiln's CMake package: kiln_tool.__version__, read from the package it belongs to (its
# parent in the torch-kiln wheel, kiln_tool/cmake; src/kiln_tool beside it in a checkout, cmake/).
#
# Architecture-independent (no CMAKE_SIZEOF_VOID_P check): it is found before project(), when no
# language and no pointer size is known yet. Compatible: the same major version and at least the one
# asked for; below 1.0, the same minor version too (0.x releases may break the API).

set(_kiln_init "${CMAKE_CURRENT_LIST_DIR}/../__init__.py")
if(NOT EXISTS "${_kiln_init}")
  set(_kiln_init "${CMAKE_CURRENT_LIST_DIR}/../src/kiln_tool/__init__.py")
endif()
set(_kiln_version_line "")
if(EXISTS "${_kiln_init}")
  file(STRINGS "${_kiln_init}" _kiln_version_line REGEX "^__version__ *= *\"[^\"]+\"" LIMIT_COUNT 1)
endif()
unset(_kiln_init)
if(NOT _kiln_version_line MATCHES "\"([0-9]+)\\.([0-9]+)[^\"]*\"")
  set(PACKAGE_VERSION "0")
  set(PACKAGE_VERSION_UNSUITABLE TRUE)
  return()
endif()
string(REGEX MATCH "\"([^\"]+)\"" _ "${_kiln_version_line}")
set(PACKAGE_VERSION "${CMAKE_MATCH_1}")
string(REGEX MATCH "^([0-9]+)\\.([0-9]+)" _ "${PACKAGE_VERSION}")
set(_kiln_major "${CMAKE_MATCH_1}")
set(_kiln_minor "${CMAKE_MATCH_2}")

set(PACKAGE_VERSION_COMPATIBLE FALSE)
set(PACKAGE_VERSION_EXACT FALSE)
if(NOT PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
elseif(PACKAGE_FIND_VERSION_MAJOR STREQUAL _kiln_major
       AND NOT PACKAGE_VERSION VERSION_LESS PACKAGE_FIND_VERSION
       AND (NOT _kiln_major STREQUAL "0" OR PACKAGE_FIND_VERSION_MINOR STREQUAL _kiln_minor))
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
endif()
if(PACKAGE_FIND_VERSION AND PACKAGE_VERSION VERSION_EQUAL PACKAGE_FIND_VERSION)
  set(PACKAGE_VERSION_EXACT TRUE)
endif()
unset(_kiln_version_line)
unset(_kiln_major)
unset(_kiln_minor)
