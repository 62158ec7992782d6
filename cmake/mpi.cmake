# Open MPI (Debian's libopenmpi-dev) for multi-process runs. Sets FG_HAVE_MPI,
# FG_MPI_SOURCES and FG_MPI_LIBS.
set(FG_HAVE_MPI OFF)
set(FG_MPI_SOURCES)
set(FG_MPI_LIBS)
