# Chooses the optional backends. A disabled backend is a stub source file chosen here
# (cpp/mdtrain/ops/cuda/no_cuda.cpp, ...); core code never tests a build flag.
# Sets MDTRAIN_BACKEND_SOURCES and MDTRAIN_BACKEND_LIBRARIES.
set(MDTRAIN_BACKEND_SOURCES "")
set(MDTRAIN_BACKEND_LIBRARIES "")
set(_src "${CMAKE_CURRENT_SOURCE_DIR}/cpp/mdtrain")

foreach(opt MDTRAIN_CUDA MDTRAIN_NCCL MDTRAIN_MPI)
  if(NOT ${opt} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${opt} must be AUTO, ON or OFF (got '${${opt}}')")
  endif()
endforeach()

# CUDA: the kernels land with the CUDA issue; until then only the stub exists, and ON says so.
if(MDTRAIN_CUDA STREQUAL "ON")
  message(FATAL_ERROR "MDTRAIN_CUDA=ON: the CUDA backend is not implemented yet (see docs/backends.md)")
endif()
list(APPEND MDTRAIN_BACKEND_SOURCES "${_src}/ops/cuda/no_cuda.cpp")
set(MDTRAIN_HAVE_CUDA OFF)

# NCCL and MPI communicators: stubs until their issues land.
if(MDTRAIN_NCCL STREQUAL "ON" OR MDTRAIN_MPI STREQUAL "ON")
  message(FATAL_ERROR "MDTRAIN_NCCL/MDTRAIN_MPI=ON: these communicators are not implemented yet (see docs/backends.md)")
endif()
list(APPEND MDTRAIN_BACKEND_SOURCES "${_src}/distribute/no_nccl.cpp" "${_src}/distribute/no_mpi.cpp")
message(STATUS "mdtrain backends: CUDA=OFF NCCL=OFF MPI=OFF (CPU + threads communicator)")
