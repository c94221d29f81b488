# python/detect.cmake - finds what the Python module needs: a Python
# interpreter with its development files (Debian's /usr/bin/python3 unless
# Python_EXECUTABLE is given: another python3 may be first on PATH; under
# scikit-build-core, the one pip builds for), pybind11 (CONFIG) and, outside a
# wheel build, numpy (the module needs it only at run time, its tests need it).
# Sets BIAFFINE_PYTHON_FOUND and, when OFF, BIAFFINE_PYTHON_WHY_NOT.
if(DEFINED BIAFFINE_PYTHON_FOUND)
  return()  # included by the top level already
endif()
set(BIAFFINE_PYTHON_FOUND OFF)
set(BIAFFINE_PYTHON_WHY_NOT "")
if(NOT DEFINED Python_EXECUTABLE AND NOT SKBUILD AND EXISTS /usr/bin/python3)
  set(Python_EXECUTABLE /usr/bin/python3 CACHE FILEPATH "Python the biaffine module is built for and tested with")
endif()
find_package(Python 3.8 COMPONENTS Interpreter Development.Module QUIET)
if(NOT Python_Interpreter_FOUND)
  set(BIAFFINE_PYTHON_WHY_NOT "no Python 3.8+ interpreter found (set Python_EXECUTABLE)")
elseif(NOT Python_Development.Module_FOUND)
  set(BIAFFINE_PYTHON_WHY_NOT "no development headers for ${Python_EXECUTABLE} (Debian: python3-dev)")
else()
  set(PYBIND11_FINDPYTHON ON)
  find_package(pybind11 2.6 CONFIG QUIET)
  if(NOT pybind11_FOUND)
    set(BIAFFINE_PYTHON_WHY_NOT "pybind11's CMake files not found (Debian: pybind11-dev; from pip: "
                                "-Dpybind11_DIR=$(python -m pybind11 --cmakedir))")
  elseif(NOT SKBUILD)
    execute_process(COMMAND ${Python_EXECUTABLE} -c "import numpy"
                    RESULT_VARIABLE _biaffine_numpy_rc OUTPUT_QUIET ERROR_QUIET)
    if(_biaffine_numpy_rc EQUAL 0)
      set(BIAFFINE_PYTHON_FOUND ON)
    else()
      set(BIAFFINE_PYTHON_WHY_NOT "${Python_EXECUTABLE} cannot import numpy (Debian: python3-numpy)")
    endif()
  else()
    set(BIAFFINE_PYTHON_FOUND ON)
  endif()
endif()
if(NOT BIAFFINE_PYTHON_FOUND)
  string(APPEND BIAFFINE_PYTHON_WHY_NOT "; scripts/install_deps.sh installs what Debian's python3 needs")
endif()
