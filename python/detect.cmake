# python/detect.cmake - finds what the Python module needs: Debian's
# /usr/bin/python3 (unless Python_EXECUTABLE is given; another python3 may be
# first on PATH), its development files, pybind11 (CONFIG) and numpy.
# Sets BIAFFINE_PYTHON_FOUND.
set(BIAFFINE_PYTHON_FOUND OFF)
if(NOT DEFINED Python_EXECUTABLE AND EXISTS /usr/bin/python3)
  set(Python_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python the biaffine module is built for and tested with")
endif()
find_package(Python 3.7 COMPONENTS Interpreter Development.Module QUIET)
if(Python_FOUND)
  set(PYBIND11_FINDPYTHON ON)
  find_package(pybind11 2.6 CONFIG QUIET)
  if(pybind11_FOUND)
    execute_process(COMMAND ${Python_EXECUTABLE} -c "import numpy"
                    RESULT_VARIABLE _biaffine_numpy_rc OUTPUT_QUIET ERROR_QUIET)
    if(_biaffine_numpy_rc EQUAL 0)
      set(BIAFFINE_PYTHON_FOUND ON)
    endif()
  endif()
endif()
if(NOT BIAFFINE_PYTHON_FOUND)
  message(STATUS "biaffine: Python module not built (needs ${Python_EXECUTABLE} with numpy, its headers and pybind11; "
                 "scripts/install_deps.sh installs them)")
endif()
