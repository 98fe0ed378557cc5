# Chooses the optional backends. A disabled backend is a stub source file chosen here
# in the backend's own folder (core/cuda/no_cuda.cpp, distribute/mpi/no_mpi.cpp, ...); core code
# never tests a build flag. The common sources' glob (CMakeLists.txt) does not enter these folders.
# Sets MDTRAIN_BACKEND_SOURCES and MDTRAIN_BACKEND_LIBRARIES.
set(MDTRAIN_BACKEND_SOURCES "")
set(MDTRAIN_BACKEND_LIBRARIES "")
set(_src "${CMAKE_CURRENT_SOURCE_DIR}/cpp/mdtrain")

foreach(opt MDTRAIN_CUDA MDTRAIN_NCCL MDTRAIN_MPI MDTRAIN_ZMQ)
  if(NOT ${opt} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${opt} must be AUTO, ON or OFF (got '${${opt}}')")
  endif()
endforeach()

# ---- CUDA ------------------------------------------------------------------------------------
# AUTO builds the backend when nvcc and the CUDA toolkit (cudart, cuBLAS) are found; ON requires
# them; OFF (and AUTO without them) compiles core/cuda/no_cuda.cpp (reports no GPU) and
# ops/cuda/no_cuda.cpp (kernels that say how to rebuild). Device
# code is built for CMAKE_CUDA_ARCHITECTURES, "80;90" (A100, H100) unless given: pass e.g.
# -DCMAKE_CUDA_ARCHITECTURES=native on a GPU machine, or one architecture to halve compile time.
set(MDTRAIN_HAVE_CUDA OFF)
if(NOT MDTRAIN_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)  # the toolkit's default place, often off PATH
  endif()
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
      set(CMAKE_CUDA_ARCHITECTURES "80;90" CACHE STRING "CUDA architectures of the device code")
    endif()
    enable_language(CUDA)
    find_package(CUDAToolkit)
  endif()
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublas)
    set(MDTRAIN_HAVE_CUDA ON)
  elseif(MDTRAIN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "MDTRAIN_CUDA=ON but nvcc and the CUDA toolkit (cudart, cuBLAS) were not found: "
                        "install the toolkit, put nvcc on PATH or set CUDACXX, or use -DMDTRAIN_CUDA=OFF")
  endif()
endif()
if(MDTRAIN_HAVE_CUDA)
  file(GLOB _cuda_src CONFIGURE_DEPENDS "${_src}/core/cuda/*.cpp" "${_src}/ops/cuda/*.cpp" "${_src}/ops/cuda/*.cu")
  list(FILTER _cuda_src EXCLUDE REGEX "/no_[a-z]+\\.cpp$")
  list(APPEND MDTRAIN_BACKEND_SOURCES ${_cuda_src})
  list(APPEND MDTRAIN_BACKEND_LIBRARIES CUDA::cudart CUDA::cublas)
else()
  list(APPEND MDTRAIN_BACKEND_SOURCES "${_src}/core/cuda/no_cuda.cpp" "${_src}/ops/cuda/no_cuda.cpp")
endif()

# ---- NCCL ------------------------------------------------------------------------------------
# AUTO: on when CUDA is and nccl.h / libnccl are found (in the CUDA toolkit or NCCL_ROOT).
set(MDTRAIN_HAVE_NCCL OFF)
if(MDTRAIN_HAVE_CUDA AND NOT MDTRAIN_NCCL STREQUAL "OFF")
  find_path(MDTRAIN_NCCL_INCLUDE_DIR nccl.h HINTS $ENV{NCCL_ROOT} ${NCCL_ROOT} ${CUDAToolkit_INCLUDE_DIRS}
            PATH_SUFFIXES include)
  find_library(MDTRAIN_NCCL_LIBRARY nccl HINTS $ENV{NCCL_ROOT} ${NCCL_ROOT} ${CUDAToolkit_LIBRARY_DIR}
               "${CUDAToolkit_LIBRARY_ROOT}/lib" PATH_SUFFIXES lib lib64)
  if(MDTRAIN_NCCL_INCLUDE_DIR AND MDTRAIN_NCCL_LIBRARY)
    set(MDTRAIN_HAVE_NCCL ON)
  endif()
endif()
if(MDTRAIN_NCCL STREQUAL "ON" AND NOT MDTRAIN_HAVE_NCCL)
  message(FATAL_ERROR "MDTRAIN_NCCL=ON needs the CUDA backend and NCCL (nccl.h, libnccl; set NCCL_ROOT), "
                      "found CUDA=${MDTRAIN_HAVE_CUDA} nccl.h='${MDTRAIN_NCCL_INCLUDE_DIR}' libnccl='${MDTRAIN_NCCL_LIBRARY}'")
endif()
if(MDTRAIN_HAVE_NCCL)
  file(GLOB _nccl_src CONFIGURE_DEPENDS "${_src}/distribute/nccl/nccl_*.cpp" "${_src}/distribute/nccl/nccl_*.cu")
  list(APPEND MDTRAIN_BACKEND_SOURCES ${_nccl_src})
  list(APPEND MDTRAIN_BACKEND_LIBRARIES "${MDTRAIN_NCCL_LIBRARY}")
  set(MDTRAIN_BACKEND_INCLUDE_DIRS "${MDTRAIN_NCCL_INCLUDE_DIR}")
else()
  list(APPEND MDTRAIN_BACKEND_SOURCES "${_src}/distribute/nccl/no_nccl.cpp")
endif()

# ---- MPI -------------------------------------------------------------------------------------
# AUTO builds the MPI communicator when an MPI C library is found (Debian: libopenmpi-dev); ON
# requires it; OFF (and AUTO without it) compiles distribute/mpi/no_mpi.cpp. Only
# mpi_communicator.cpp sees mpi.h: the include path and flags are set on that one file, and the
# library is a link-only dependency ($<LINK_ONLY:...>, what PRIVATE means for a static library),
# so code using mdtrain never needs MPI's headers; mdtrainConfig.cmake finds MPI again for the
# link (MDTRAIN_HAVE_MPI).
set(MDTRAIN_HAVE_MPI OFF)
set(_mpi_src "${_src}/distribute/mpi/mpi_communicator.cpp")
if(NOT MDTRAIN_MPI STREQUAL "OFF")
  include(CheckLanguage)
  check_language(C)  # FindMPI's C component needs the C language (the project itself is C++)
  if(CMAKE_C_COMPILER)
    enable_language(C)
    find_package(MPI COMPONENTS C)
  endif()
  if(MPI_C_FOUND)
    set(MDTRAIN_HAVE_MPI ON)
  elseif(MDTRAIN_MPI STREQUAL "ON")
    message(FATAL_ERROR "MDTRAIN_MPI=ON but no MPI C library was found: install one (Debian: "
                        "openmpi-bin libopenmpi-dev), point MPI_HOME at it, or use -DMDTRAIN_MPI=OFF")
  endif()
endif()
if(MDTRAIN_HAVE_MPI)
  set_source_files_properties("${_mpi_src}" PROPERTIES
    INCLUDE_DIRECTORIES "${MPI_C_INCLUDE_DIRS}"
    COMPILE_DEFINITIONS "${MPI_C_COMPILE_DEFINITIONS}"
    COMPILE_OPTIONS "${MPI_C_COMPILE_OPTIONS}")
  list(APPEND MDTRAIN_BACKEND_SOURCES "${_mpi_src}")
  list(APPEND MDTRAIN_BACKEND_LIBRARIES "$<LINK_ONLY:MPI::MPI_C>")
else()
  list(APPEND MDTRAIN_BACKEND_SOURCES "${_src}/distribute/mpi/no_mpi.cpp")
endif()

# ---- ZeroMQ ----------------------------------------------------------------------------------
# The parameter server's transport (distribute/zmq/). AUTO builds it when pkg-config finds libzmq
# (Debian: libzmq3-dev); ON requires it; OFF (and AUTO without it) compiles distribute/zmq/no_zmq.cpp,
# whose functions throw a clear "[ps] mdtrain was built without ZeroMQ" error. As for MPI, only
# the transport's own sources see zmq.h (include path set per file) and the library is link-only.
set(MDTRAIN_HAVE_ZMQ OFF)
file(GLOB _zmq_src CONFIGURE_DEPENDS "${_src}/distribute/zmq/zmq_*.cpp")
if(NOT MDTRAIN_ZMQ STREQUAL "OFF")
  find_package(PkgConfig QUIET)
  if(PKG_CONFIG_FOUND)
    pkg_check_modules(MDTRAIN_LIBZMQ QUIET IMPORTED_TARGET libzmq)
  endif()
  if(MDTRAIN_LIBZMQ_FOUND)
    set(MDTRAIN_HAVE_ZMQ ON)
  elseif(MDTRAIN_ZMQ STREQUAL "ON")
    message(FATAL_ERROR "MDTRAIN_ZMQ=ON but libzmq was not found by pkg-config: install it (Debian: "
                        "libzmq3-dev pkg-config) or use -DMDTRAIN_ZMQ=OFF")
  endif()
endif()
if(MDTRAIN_HAVE_ZMQ)
  set_source_files_properties(${_zmq_src} PROPERTIES
    INCLUDE_DIRECTORIES "${MDTRAIN_LIBZMQ_INCLUDE_DIRS}"
    COMPILE_OPTIONS "${MDTRAIN_LIBZMQ_CFLAGS_OTHER}")
  list(APPEND MDTRAIN_BACKEND_SOURCES ${_zmq_src})
  list(APPEND MDTRAIN_BACKEND_LIBRARIES "$<LINK_ONLY:PkgConfig::MDTRAIN_LIBZMQ>")
else()
  list(APPEND MDTRAIN_BACKEND_SOURCES "${_src}/distribute/zmq/no_zmq.cpp")
endif()
message(STATUS "mdtrain backends: CUDA=${MDTRAIN_HAVE_CUDA} NCCL=${MDTRAIN_HAVE_NCCL} MPI=${MDTRAIN_HAVE_MPI} ZMQ=${MDTRAIN_HAVE_ZMQ}")
