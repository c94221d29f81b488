# tests/layout.cmake: rules of the source tree that no compiler checks.
#   cmake -DSOURCE_DIR=<project> -P layout.cmake
# - no bench includes a file of tests/ (what both use lives in reference/);
# - scorer.hpp's table of the scorer's parts (its opening comment) names every
#   detail/scorer/*.hpp it includes;
# - the scorer's parts (detail/scorer/) are included by scorer.hpp and by
#   each other only.
if(NOT SOURCE_DIR)
  message(FATAL_ERROR "layout.cmake: -DSOURCE_DIR=... is required")
endif()
set(_failures 0)

file(GLOB _bench_sources ${SOURCE_DIR}/bench/*.cpp ${SOURCE_DIR}/bench/*.hpp)
foreach(_file IN LISTS _bench_sources)
  file(STRINGS ${_file} _includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]([.][.]/)*tests/")
  foreach(_line IN LISTS _includes)
    message(SEND_ERROR "${_file}: a bench includes a test file: ${_line}")
    math(EXPR _failures "${_failures} + 1")
  endforeach()
endforeach()

set(_scorer ${SOURCE_DIR}/include/biaffine/scorer.hpp)
file(STRINGS ${_scorer} _parts REGEX "^#include \"biaffine/detail/scorer/[a-z0-9_]+[.]hpp\"")
file(STRINGS ${_scorer} _comment REGEX "^//")
list(LENGTH _parts _n)
if(_n EQUAL 0)
  message(SEND_ERROR "${_scorer}: no detail/scorer/*.hpp included")
  math(EXPR _failures "${_failures} + 1")
endif()
foreach(_line IN LISTS _parts)
  string(REGEX MATCH "detail/scorer/[a-z0-9_]+[.]hpp" _part "${_line}")
  string(REPLACE "." "[.]" _pattern "${_part}")
  set(_listed OFF)
  foreach(_c IN LISTS _comment)
    if(_c MATCHES "^//   ${_pattern} ")
      set(_listed ON)
    endif()
  endforeach()
  if(NOT _listed)
    message(SEND_ERROR "${_scorer}: includes ${_part}, which its table of the scorer's parts does not name")
    math(EXPR _failures "${_failures} + 1")
  endif()
endforeach()

file(GLOB_RECURSE _sources ${SOURCE_DIR}/include/*.hpp ${SOURCE_DIR}/tests/*.cpp ${SOURCE_DIR}/tests/*.hpp
     ${SOURCE_DIR}/bench/*.cpp ${SOURCE_DIR}/bench/*.hpp ${SOURCE_DIR}/examples/*.cpp ${SOURCE_DIR}/fuzz/*.cpp
     ${SOURCE_DIR}/python/src/*.cpp ${SOURCE_DIR}/python/src/*.hpp)
foreach(_file IN LISTS _sources)
  if(_file STREQUAL _scorer OR _file MATCHES "/include/biaffine/detail/scorer/")
    continue()
  endif()
  file(STRINGS ${_file} _includes REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]biaffine/detail/scorer/")
  foreach(_line IN LISTS _includes)
    message(SEND_ERROR "${_file}: includes a part of the scorer (only scorer.hpp may): ${_line}")
    math(EXPR _failures "${_failures} + 1")
  endforeach()
endforeach()

if(_failures GREATER 0)
  message(FATAL_ERROR "${_failures} layout rule(s) broken")
endif()
message(STATUS "layout: bench includes nothing from tests/; scorer.hpp names its ${_n} parts, which nothing else includes")
