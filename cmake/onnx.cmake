# ONNX import and export (schema/onnx/): protobuf-c, with C code generated at
# build time from the onnx.proto that Debian's python3-onnx installs (never a
# copy in this tree). Sets FG_HAVE_ONNX, FG_ONNX_SOURCES, FG_ONNX_LIBS,
# FG_PC_ONNX and FG_ONNX_GEN_DIR.
#
# FG_ONNX=AUTO (default) builds the importer when protoc-c, libprotobuf-c and
# onnx.proto are found and says what is missing otherwise; ON requires them;
# OFF leaves it out. Without it schema/onnx/onnx_none.c makes every ONNX call
# report FG_UNIMPLEMENTED, so callers need no #ifdef.
set(FG_ONNX AUTO CACHE STRING "Build the ONNX importer and exporter: AUTO, ON or OFF")
set_property(CACHE FG_ONNX PROPERTY STRINGS AUTO ON OFF)
set(FG_HAVE_ONNX OFF)
set(FG_ONNX_SOURCES ${CMAKE_SOURCE_DIR}/schema/onnx/onnx_none.c)
set(FG_ONNX_LIBS)
set(FG_PC_ONNX "")
set(FG_ONNX_GEN_DIR ${FG_GEN_DIR}/onnx)
if(NOT FG_ONNX STREQUAL "OFF")
  find_program(FG_PROTOC_C NAMES protoc-c)
  find_library(FG_PROTOBUF_C_LIBRARY NAMES protobuf-c)
  find_path(FG_PROTOBUF_C_INCLUDE_DIR protobuf-c/protobuf-c.h)
  # python3-onnx installs the schema beside its Python modules.
  find_file(FG_ONNX_PROTO onnx.proto
            PATHS /usr/lib/python3/dist-packages/onnx /usr/local/lib/python3/dist-packages/onnx
            NO_DEFAULT_PATH)
  set(missing)
  if(NOT FG_PROTOC_C)
    list(APPEND missing "protoc-c (protobuf-c-compiler)")
  endif()
  if(NOT FG_PROTOBUF_C_LIBRARY OR NOT FG_PROTOBUF_C_INCLUDE_DIR)
    list(APPEND missing "libprotobuf-c (libprotobuf-c-dev)")
  endif()
  if(NOT FG_ONNX_PROTO)
    list(APPEND missing "onnx/onnx.proto (python3-onnx)")
  endif()
  if(missing)
    string(JOIN ", " missing_text ${missing})
    if(FG_ONNX STREQUAL "ON")
      message(FATAL_ERROR "FG_ONNX=ON but missing: ${missing_text}")
    endif()
    message(WARNING "flowgraph: ONNX import and export left out (missing: ${missing_text}); "
                    "tools/install_deps.sh installs them")
  else()
    set(FG_HAVE_ONNX ON)
    file(MAKE_DIRECTORY ${FG_ONNX_GEN_DIR}/onnx)
    # protoc-c names its output after the .proto's path relative to
    # --proto_path: generated/onnx/onnx/onnx.pb-c.{c,h}, included as
    # "onnx/onnx.pb-c.h" with generated/onnx on the include path.
    get_filename_component(proto_dir ${FG_ONNX_PROTO} DIRECTORY)
    get_filename_component(proto_root ${proto_dir} DIRECTORY)
    add_custom_command(
      OUTPUT ${FG_ONNX_GEN_DIR}/onnx/onnx.pb-c.c ${FG_ONNX_GEN_DIR}/onnx/onnx.pb-c.h
      COMMAND ${FG_PROTOC_C} --proto_path=${proto_root} --c_out=${FG_ONNX_GEN_DIR} ${FG_ONNX_PROTO}
      DEPENDS ${FG_ONNX_PROTO}
      COMMENT "protoc-c: ${FG_ONNX_PROTO}")
    file(GLOB FG_ONNX_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/schema/onnx/*.c)
    list(REMOVE_ITEM FG_ONNX_SOURCES ${CMAKE_SOURCE_DIR}/schema/onnx/onnx_none.c)
    list(APPEND FG_ONNX_SOURCES ${FG_ONNX_GEN_DIR}/onnx/onnx.pb-c.c)
    # Generated code is not ours to keep -Wextra clean.
    set_source_files_properties(${FG_ONNX_GEN_DIR}/onnx/onnx.pb-c.c PROPERTIES
                                COMPILE_OPTIONS "-w" GENERATED ON)
    set(FG_ONNX_LIBS ${FG_PROTOBUF_C_LIBRARY})
    set(FG_PC_ONNX "-lprotobuf-c ")
    include_directories(SYSTEM ${FG_PROTOBUF_C_INCLUDE_DIR})
    add_compile_definitions(FG_HAVE_ONNX=1)
  endif()
endif()
