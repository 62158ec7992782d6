# Open MPI (Debian's libopenmpi-dev) for multi-process runs. Sets FG_HAVE_MPI,
# FG_MPI_SOURCES and FG_MPI_LIBS.
#
# FG_MPI=AUTO (default) builds the MPI communicator when MPI is found, ON
# requires it, OFF never builds it. dist/comm/comm_mpi.c is globbed into every
# build (the top CMakeLists takes dist/comm/*.c); without FG_HAVE_MPI it compiles
# to stubs that report FG_UNIMPLEMENTED, so callers need no #ifdef.
set(FG_MPI AUTO CACHE STRING "Build the MPI communicator: AUTO, ON or OFF")
set_property(CACHE FG_MPI PROPERTY STRINGS AUTO ON OFF)
set(FG_HAVE_MPI OFF)
set(FG_MPI_SOURCES)
set(FG_MPI_LIBS)
if(NOT FG_MPI STREQUAL "OFF")
  if(FG_MPI STREQUAL "ON")
    find_package(MPI COMPONENTS C REQUIRED)
  else()
    find_package(MPI COMPONENTS C QUIET)
  endif()
  if(MPI_C_FOUND)
    set(FG_HAVE_MPI ON)
    set(FG_MPI_LIBS MPI::MPI_C)
    # fg_objects is an OBJECT library that links nothing, so mpi.h must be on
    # the include path directly; the definition tells sources and tests.
    include_directories(SYSTEM ${MPI_C_INCLUDE_DIRS})
    add_compile_definitions(FG_HAVE_MPI=1)
    find_program(FG_MPIEXEC NAMES mpirun mpiexec)
    # bench/dist_bench.sh builds this on demand (make bench), not in `all`.
    # flowgraph_static is defined after this file; names resolve at generate
    # time.
    if(EXISTS ${CMAKE_SOURCE_DIR}/bench/dist_bench.c)
      add_executable(dist_bench EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/bench/dist_bench.c)
      target_link_libraries(dist_bench PRIVATE flowgraph_static)
      set_target_properties(dist_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
    endif()
    message(STATUS "flowgraph: MPI communicator on (${MPI_C_LIBRARIES})")
  else()
    message(STATUS "flowgraph: MPI not found; --dist mpi reports UNIMPLEMENTED")
  endif()
endif()

# NCCL for cuda:N replicas (dist/comm/comm_nccl.c): only in a CUDA build
# (cmake/cuda.cmake, included before this file) whose toolkit has nccl.h
# and libnccl. Without them the file compiles to stubs.
set(FG_HAVE_NCCL OFF)
if(FG_HAVE_CUDA)
  find_path(FG_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(FG_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(FG_NCCL_INCLUDE_DIR AND FG_NCCL_LIBRARY)
    set(FG_HAVE_NCCL ON)
    include_directories(SYSTEM ${FG_NCCL_INCLUDE_DIR})
    add_compile_definitions(FG_HAVE_NCCL=1)
    list(APPEND FG_MPI_LIBS ${FG_NCCL_LIBRARY})
    message(STATUS "flowgraph: NCCL communicator on (${FG_NCCL_LIBRARY})")
  else()
    message(STATUS "flowgraph: nccl.h or libnccl not found; no NCCL communicator")
  endif()
endif()
