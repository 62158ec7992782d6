/* Preloaded into the MPI test ranks of the ASan build (tests/CMakeLists.txt,
 * tests/dist/mpi/mpi_run.h): a dlclose that unloads nothing.
 *
 * Open MPI dlcloses its components (mca_*.so) at MPI_Finalize but keeps
 * allocations made in them until exit. At exit LeakSanitizer matches each
 * such block's stack against lsan_openmpi.supp by module; a frame in an
 * unloaded component has no module, so LSan rereads /proc/self/maps for it,
 * frame after frame, and the ranks spent most of their time there. With the
 * components left loaded every frame resolves, and the ranks can use the
 * fast frame-pointer unwinder on malloc: their one call frame in Open MPI
 * names the library. A rank exits right after MPI_Finalize, so nothing
 * else it loads needs unloading. */
int dlclose(void *handle) {
  (void)handle;
  return 0;
}
