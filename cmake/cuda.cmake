# The CUDA backend. FG_CUDA=AUTO (default) builds it when the toolkit is found
# (nvcc at /usr/local/cuda or on PATH), ON requires it, OFF never builds it.
# The CPU-only build links nothing from CUDA, so it never needs CUDA at run
# time. Sets FG_HAVE_CUDA, FG_CUDA_SOURCES (added to the library) and
# FG_CUDA_LIBS (linked with it).
#
# AUTO also stays off in sanitizer builds (FG_SANITIZE): nvcc does not take
# -fsanitize, and the CUDA runtime is not ASan/TSan clean, so the sanitizer
# runs cover the CPU code only. FG_CUDA=ON with FG_SANITIZE is refused.
set(FG_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE FG_CUDA PROPERTY STRINGS AUTO ON OFF)
# sm_90 (H100/H200) machine code plus compute_90 PTX, which the driver JITs
# for newer GPUs.
set(FG_CUDA_ARCHITECTURES "90-real;90-virtual" CACHE STRING "CMAKE_CUDA_ARCHITECTURES for the CUDA backend")
set(FG_HAVE_CUDA OFF)
set(FG_CUDA_SOURCES ${CMAKE_SOURCE_DIR}/kernels/cuda_stub.c ${CMAKE_SOURCE_DIR}/executor/cuda/stub.c)
set(FG_CUDA_LIBS)

string(TOUPPER "${FG_CUDA}" _fg_cuda_mode)
if(NOT _fg_cuda_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "FG_CUDA must be AUTO, ON or OFF (given '${FG_CUDA}')")
endif()

set(_fg_nvcc "")
if(NOT _fg_cuda_mode STREQUAL "OFF")
  if(CMAKE_CUDA_COMPILER)
    set(_fg_nvcc ${CMAKE_CUDA_COMPILER})
  elseif(EXISTS /usr/local/cuda/bin/nvcc)
    set(_fg_nvcc /usr/local/cuda/bin/nvcc)
  else()
    find_program(_fg_nvcc_found nvcc)
    if(_fg_nvcc_found)
      set(_fg_nvcc ${_fg_nvcc_found})
    endif()
  endif()
  if(FG_SANITIZE)
    if(_fg_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "FG_CUDA=ON cannot be combined with FG_SANITIZE=${FG_SANITIZE}")
    endif()
    message(STATUS "CUDA backend: off (sanitizer build ${FG_SANITIZE})")
    set(_fg_nvcc "")
  elseif(NOT _fg_nvcc)
    if(_fg_cuda_mode STREQUAL "ON")
      message(FATAL_ERROR "FG_CUDA=ON but nvcc was not found (looked at /usr/local/cuda/bin/nvcc and PATH)")
    endif()
    message(STATUS "CUDA backend: off (no nvcc)")
  endif()
endif()

if(_fg_nvcc)
  set(CMAKE_CUDA_COMPILER ${_fg_nvcc})
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES ${FG_CUDA_ARCHITECTURES})
  endif()
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # One CUDA runtime per process: the shared one, which CUDA::cudart names
  # too (the default, static, would put a second copy beside it).
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)

  # The top-level -Wall -Wextra are host compiler flags; nvcc rejects them
  # unless forwarded with -Xcompiler. Rewrite this directory's options so C
  # and C++ keep them unchanged and CUDA gets them through to gcc.
  get_property(_fg_opts DIRECTORY PROPERTY COMPILE_OPTIONS)
  set(_fg_new_opts)
  foreach(_o IN LISTS _fg_opts)
    list(APPEND _fg_new_opts "$<$<NOT:$<COMPILE_LANGUAGE:CUDA>>:${_o}>"
         "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=${_o}>")
  endforeach()
  set_property(DIRECTORY PROPERTY COMPILE_OPTIONS ${_fg_new_opts})

  set(FG_HAVE_CUDA ON)
  # Every target (library, tests, bench, CLI) sees FG_HAVE_CUDA and can
  # include cuda_runtime_api.h, so test files can ask for a device.
  add_compile_definitions(FG_HAVE_CUDA=1)
  include_directories(${CUDAToolkit_INCLUDE_DIRS})

  file(GLOB _fg_kernel_cu CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/kernels/cuda/*.cu)
  file(GLOB _fg_exec_cuda CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/executor/cuda/*.c
       ${CMAKE_SOURCE_DIR}/executor/cuda/*.cu)
  list(REMOVE_ITEM _fg_exec_cuda ${CMAKE_SOURCE_DIR}/executor/cuda/stub.c)
  set(FG_CUDA_SOURCES ${_fg_kernel_cu} ${_fg_exec_cuda})
  # The kernel registry lives in kernels/cuda/registry.cu; until that file
  # exists the stub registry (no kernels) keeps the build linking.
  if(NOT EXISTS ${CMAKE_SOURCE_DIR}/kernels/cuda/registry.cu)
    list(APPEND FG_CUDA_SOURCES ${CMAKE_SOURCE_DIR}/kernels/cuda_stub.c)
  endif()
  # cuBLAS is not linked: kernels/cuda/cublas_lazy.cu loads it on first use
  # (its static initialisers cost every process ~0.35 s at start). Hidden
  # symbols there, so libflowgraph.so does not export cuBLAS's names.
  set(FG_CUDA_LIBS CUDA::cudart ${CMAKE_DL_LIBS})
  # cuDNN (kernels/cuda/conv.cu), from the toolkit's folder: the convolution
  # kernels need it, so a CUDA build does too.
  find_library(FG_CUDNN_LIBRARY NAMES cudnn HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  find_path(FG_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  if(NOT FG_CUDNN_LIBRARY OR NOT FG_CUDNN_INCLUDE_DIR)
    message(FATAL_ERROR "CUDA backend: cuDNN (libcudnn, cudnn.h) not found beside the toolkit; "
                        "install it or configure with -DFG_CUDA=OFF")
  endif()
  list(APPEND FG_CUDA_LIBS ${FG_CUDNN_LIBRARY})
  include_directories(${FG_CUDNN_INCLUDE_DIR})
  set_source_files_properties(${CMAKE_SOURCE_DIR}/kernels/cuda/cublas_lazy.cu
    ${CMAKE_SOURCE_DIR}/kernels/cuda/cublaslt_lazy.cu PROPERTIES
    COMPILE_OPTIONS "-Xcompiler=-fvisibility=hidden"
    COMPILE_DEFINITIONS "FG_CUBLAS_DIR=\"${CUDAToolkit_LIBRARY_DIR}\"")
  message(STATUS "CUDA backend: on (${CMAKE_CUDA_COMPILER}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
endif()

# NVRTC, for the fused element-wise GPU kernels (kernels/cuda/nvrtc_cache.c),
# in every build: that file is plain C and loads libnvrtc with dlopen on
# first use, so the generated kernels compile and their cache is tested on
# machines without a GPU, and nothing links NVRTC. It looks for the soname
# of the toolkit the build uses, then for the file found here.
find_library(FG_NVRTC_LIBRARY NAMES nvrtc
             HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64 /usr/local/cuda/lib)
set(_fg_nvrtc_defs)
if(FG_NVRTC_LIBRARY)
  list(APPEND _fg_nvrtc_defs "FG_NVRTC_PATH=\"${FG_NVRTC_LIBRARY}\"")
endif()
if(FG_HAVE_CUDA AND CUDAToolkit_VERSION_MAJOR)
  list(APPEND _fg_nvrtc_defs "FG_NVRTC_SONAME=\"libnvrtc.so.${CUDAToolkit_VERSION_MAJOR}\"")
endif()
if(_fg_nvrtc_defs)
  set_source_files_properties(${CMAKE_SOURCE_DIR}/kernels/cuda/nvrtc_cache.c PROPERTIES
    COMPILE_DEFINITIONS "${_fg_nvrtc_defs}")
endif()
if(FG_NVRTC_LIBRARY)
  message(STATUS "NVRTC for fused GPU kernels: ${FG_NVRTC_LIBRARY} (loaded on first use)")
else()
  message(STATUS "NVRTC for fused GPU kernels: not found here; libnvrtc.so is looked for at run time")
endif()
