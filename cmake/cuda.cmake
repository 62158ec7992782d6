# The CUDA backend. FG_CUDA=AUTO (default) builds it when the toolkit is found
# (nvcc at /usr/local/cuda or on PATH), ON requires it, OFF never builds it.
# The CPU-only build links nothing from CUDA, so it never needs CUDA at run
# time. Sets FG_HAVE_CUDA, FG_CUDA_SOURCES (added to the library) and
# FG_CUDA_LIBS (linked with it).
set(FG_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE FG_CUDA PROPERTY STRINGS AUTO ON OFF)
set(FG_HAVE_CUDA OFF)
set(FG_CUDA_SOURCES ${CMAKE_SOURCE_DIR}/kernels/cuda_stub.c)
set(FG_CUDA_LIBS)
