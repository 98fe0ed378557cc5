# Finds the CPU BLAS and defines the imported target mdtrain::blas.
#
# Order: MDTRAIN_BLAS_LIBRARY/MDTRAIN_BLAS_INCLUDE_DIR if given; the scipy-openblas32 wheel of the
# Python on PATH (what `pip install` uses, so no system library is needed); a system OpenBLAS.
# OpenBLAS is required (not any BLAS): replicas switch BLAS to one thread with
# openblas_set_num_threads. Used by the build and by the installed mdtrainConfig.cmake.
if(TARGET mdtrain::blas)
  return()
endif()

set(_mdtrain_blas_prefix "")
if(NOT MDTRAIN_BLAS_LIBRARY)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c
              "import scipy_openblas32 as s, os; print(s.get_include_dir()); print(os.path.join(s.get_lib_dir(), 'lib' + s.get_library() + '.so'))"
      OUTPUT_VARIABLE _mdtrain_sob OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE _mdtrain_sob_rc ERROR_QUIET)
    if(_mdtrain_sob_rc EQUAL 0)
      string(REPLACE "\n" ";" _mdtrain_sob "${_mdtrain_sob}")
      list(GET _mdtrain_sob 0 MDTRAIN_BLAS_INCLUDE_DIR)
      list(GET _mdtrain_sob 1 MDTRAIN_BLAS_LIBRARY)
      set(_mdtrain_blas_prefix "scipy_")
    endif()
  endif()
endif()
if(NOT MDTRAIN_BLAS_LIBRARY)
  find_library(MDTRAIN_BLAS_LIBRARY NAMES openblas openblas64)
  find_path(MDTRAIN_BLAS_INCLUDE_DIR cblas.h PATH_SUFFIXES openblas)
endif()
if(NOT MDTRAIN_BLAS_LIBRARY OR NOT MDTRAIN_BLAS_INCLUDE_DIR)
  message(FATAL_ERROR "mdtrain needs OpenBLAS: `pip install scipy-openblas32` (no root needed) "
                      "or `apt-get install libopenblas-dev`, or set MDTRAIN_BLAS_LIBRARY and MDTRAIN_BLAS_INCLUDE_DIR.")
endif()
if(NOT DEFINED MDTRAIN_BLAS_PREFIX)
  set(MDTRAIN_BLAS_PREFIX "${_mdtrain_blas_prefix}")
endif()
message(STATUS "mdtrain BLAS: ${MDTRAIN_BLAS_LIBRARY} (symbol prefix '${MDTRAIN_BLAS_PREFIX}')")
add_library(mdtrain::blas UNKNOWN IMPORTED)
set_target_properties(mdtrain::blas PROPERTIES
  IMPORTED_LOCATION "${MDTRAIN_BLAS_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${MDTRAIN_BLAS_INCLUDE_DIR}")
