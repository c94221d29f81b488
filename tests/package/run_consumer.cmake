# Builds and runs tests/package/consumer against biaffine one way, from scratch:
#
#   cmake -DMODE=install|subdirectory|fetchcontent -DSOURCE_DIR=<biaffine>
#         -DWORK_DIR=<scratch dir> [-DGENERATOR=...] [-DCXX=...] [-DPREFIX_PATH=...]
#         [-DEigen3_DIR=...] [-Dxtensor_DIR=...]
#         -P run_consumer.cmake
#
#   install       configure biaffine alone, `cmake --install` it into a prefix,
#                 check the installed files, then find_package(biaffine) from it
#   subdirectory  add_subdirectory(<biaffine sources>)
#   fetchcontent  pack the sources a release archive would hold into a local
#                 .tar.gz and FetchContent it by URL with its SHA256
#
# Fails on any configure / build / run error, and on any CMake warning in the
# consumer's configure output (a package that warns in a user's build is a bug).
cmake_minimum_required(VERSION 3.21)

foreach(var MODE SOURCE_DIR WORK_DIR)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "run_consumer.cmake: -D${var}=... is required")
  endif()
endforeach()
get_filename_component(consumer_dir "${CMAKE_CURRENT_LIST_DIR}/consumer" ABSOLUTE)

set(common_args)
if(GENERATOR)
  list(APPEND common_args -G "${GENERATOR}")
endif()
if(CXX)
  list(APPEND common_args "-DCMAKE_CXX_COMPILER=${CXX}")
endif()
# Where the parent build found the dependencies, so the consumer finds the same.
foreach(dep Eigen3_DIR xtensor_DIR)
  if(${dep})
    list(APPEND common_args "-D${dep}=${${dep}}")
  endif()
endforeach()
# No build type: -O0 without debug info compiles fastest; the consumer's run is tiny.
list(APPEND common_args "-DCMAKE_BUILD_TYPE=")

file(REMOVE_RECURSE "${WORK_DIR}")
file(MAKE_DIRECTORY "${WORK_DIR}")

# run(<step> <command...>): runs a command, fails the test with its output on error.
function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  set(step_output "${out}${err}" PARENT_SCOPE)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test (${MODE}): ${step} failed (${rc}):\n${out}${err}")
  endif()
  message(STATUS "${step}: ok")
endfunction()

set(prefix_path "${PREFIX_PATH}")
set(consumer_args)
if(MODE STREQUAL "install")
  set(prefix "${WORK_DIR}/prefix")
  run("configure biaffine"
      ${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${WORK_DIR}/biaffine-build" ${common_args}
      -DBIAFFINE_BUILD_TESTS=OFF -DBIAFFINE_BUILD_BENCH=OFF -DBIAFFINE_BUILD_EXAMPLES=OFF -DBIAFFINE_BUILD_PYTHON=OFF
      "-DCMAKE_PREFIX_PATH=${prefix_path}" "-DCMAKE_INSTALL_PREFIX=${prefix}")
  run("install biaffine" ${CMAKE_COMMAND} --install "${WORK_DIR}/biaffine-build")
  foreach(f include/biaffine/biaffine.hpp include/biaffine/version.hpp include/biaffine/decode.hpp
            include/biaffine/lazy_split.hpp include/biaffine/detail/checked.hpp
            share/cmake/biaffine/biaffineConfig.cmake share/cmake/biaffine/biaffineConfigVersion.cmake
            share/cmake/biaffine/biaffineTargets.cmake)
    if(NOT EXISTS "${prefix}/${f}")
      message(FATAL_ERROR "package test (install): ${f} is not installed under ${prefix}")
    endif()
  endforeach()
  list(PREPEND prefix_path "${prefix}")
  list(APPEND consumer_args -DBIAFFINE_CONSUMER_MODE=find_package)
elseif(MODE STREQUAL "subdirectory")
  list(APPEND consumer_args -DBIAFFINE_CONSUMER_MODE=add_subdirectory "-DBIAFFINE_SOURCE_DIR=${SOURCE_DIR}")
elseif(MODE STREQUAL "fetchcontent")
  # What a release archive holds: the build files, the headers, the docs.
  set(stage "${WORK_DIR}/stage/biaffine-src")
  file(MAKE_DIRECTORY "${stage}")
  foreach(item CMakeLists.txt cmake include LICENSE README.md CHANGELOG.md)
    if(EXISTS "${SOURCE_DIR}/${item}")
      file(COPY "${SOURCE_DIR}/${item}" DESTINATION "${stage}")
    endif()
  endforeach()
  set(archive "${WORK_DIR}/biaffine-src.tar.gz")
  execute_process(COMMAND ${CMAKE_COMMAND} -E tar czf "${archive}" biaffine-src
                  WORKING_DIRECTORY "${WORK_DIR}/stage" RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "package test (fetchcontent): cannot create ${archive}")
  endif()
  file(SHA256 "${archive}" sha)
  list(APPEND consumer_args -DBIAFFINE_CONSUMER_MODE=fetchcontent "-DBIAFFINE_URL=file://${archive}"
       "-DBIAFFINE_URL_HASH=SHA256=${sha}")
else()
  message(FATAL_ERROR "run_consumer.cmake: MODE must be install, subdirectory or fetchcontent, got '${MODE}'")
endif()

set(build "${WORK_DIR}/consumer-build")
run("configure consumer" ${CMAKE_COMMAND} -S "${consumer_dir}" -B "${build}" ${common_args}
    "-DCMAKE_PREFIX_PATH=${prefix_path}" ${consumer_args})
if(step_output MATCHES "CMake (Deprecation )?Warning")
  message(FATAL_ERROR "package test (${MODE}): the consumer's configure warns:\n${step_output}")
endif()
if(NOT MODE STREQUAL "install")
  # Not the top-level project: biaffine must not add its tests, benches or examples.
  foreach(dir tests bench examples)
    if(EXISTS "${build}/biaffine/${dir}" OR EXISTS "${build}/_deps/biaffine-build/${dir}")
      message(FATAL_ERROR "package test (${MODE}): biaffine's ${dir}/ was configured in a consumer build")
    endif()
  endforeach()
endif()
run("build consumer" ${CMAKE_COMMAND} --build "${build}")
if(EXISTS "${build}/app")
  set(app "${build}/app")
else()
  file(GLOB_RECURSE app "${build}/app" "${build}/app.exe")
endif()
run("run consumer" "${app}")
message(STATUS "${step_output}")
