/* The MPI communicator's shared-memory path: where every rank (or every
 * rank of a host) shares one host, the first all_reduce sets up one POSIX
 * shared-memory segment (dist/comm/shm_reduce.h) and later ones go through
 * it; the queries of the path taken. The rest of the communicator is in
 * dist/comm/comm_mpi.c and comm_mpi_msg.c. */
#ifdef FG_HAVE_MPI
#include "dist/comm/comm_mpi_internal.h"

/* ---- all_reduce through shared memory (dist/comm/shm_reduce.h) -------------- */

static atomic_uint g_shm_serial; /* this process's segments so far: names */

/* The stop hook of shared-memory waits: a peer's abort, or this rank's. */
int fgm_shm_stop(void *ctx, const char *desc, fg_status *st) {
  mpi_comm *m = ctx;
  fgm_probe_abort(m);
  return fgm_stopped(m, desc, st);
}

/* Neither FG_MPI_SHM=0 nor FG_MPI_SHM_ARENA=0 here. */
static int arenas_allowed(void) {
  const char *env = getenv("FG_MPI_SHM"), *arena = getenv("FG_MPI_SHM_ARENA");
  return !(env && strcmp(env, "0") == 0) && !(arena && strcmp(arena, "0") == 0);
}

/* Which host each rank is on, from the gathered values' host hashes
 * (high 32 bits): hosts in order of their first rank. Fills host[p],
 * local[p] (rank p's index among its host's ranks) and size[h] (host h's
 * rank count; n entries), and returns the number of hosts, or 0 when out
 * of memory. One pass, each rank against the hosts so far: O(n * hosts). */
static int group_hosts(const uint64_t *all, int n, int *host, int *local, int *size) {
  int *first = malloc((size_t)n * sizeof *first); /* each host's first rank */
  if (!first) return 0;
  int hosts = 0;
  for (int p = 0; p < n; p++) {
    int h = 0;
    while (h < hosts && all[first[h]] >> 32 != all[p] >> 32)
      h++;
    if (h == hosts) {
      first[hosts] = p;
      size[hosts++] = 0;
    }
    host[p] = h;
    local[p] = size[h]++;
  }
  free(first);
  return hosts;
}

/* Every rank mapped the segment *s: installs it as m's path (taking *s),
 * with, across hosts, each owner's group of ranks (m->cross) and the
 * segment's names for this host's ranks (`size`, reused), and the path's
 * description in m->shm_why. 0, or -1 when out of memory (the
 * communicator is broken then: every rank must take the same path). */
static int shm_install(mpi_comm *m, fg_shm_reduce **s, int in_place, int hosts, int smallest,
                       int largest, int local_n, const int *host_of, const int *local, int *size,
                       fg_status *st) {
  const int n = m->base.size, me = m->base.rank;
  if (hosts > 1) {
    /* The smallest host's count of ranks own the slices: every host has
     * them, so each owner's group spans every host. */
    m->cross = malloc((size_t)hosts * sizeof *m->cross);
    if (!m->cross) {
      /* Every rank must take the same path, and this one cannot follow. */
      fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce setup: out of memory");
      fgm_set_broken(m);
      return -1;
    }
    /* Only an owner's group is complete (a non-owner's local index may be
     * past a smaller host's ranks): -1 elsewhere, never used. The segment's
     * errors name ranks as the user knows them: this host's ranks by local
     * index, in `size` (no longer needed). */
    for (int h = 0; h < hosts; h++)
      m->cross[h] = -1;
    for (int p = 0; p < n; p++) {
      if (local[p] == local[me]) m->cross[host_of[p]] = p;
      if (host_of[p] == host_of[me]) size[local[p]] = p;
    }
    fg_shm_reduce_name_ranks(*s, size, m->base.size);
    m->hosts = hosts;
    m->cross_me = host_of[me];
    m->owners = smallest;
  }
  fg_shm_reduce_set_in_place(*s, in_place);
  m->shm = *s;
  m->shm_local = local[me];
  *s = NULL;
  if (hosts > 1 && smallest == largest)
    snprintf(m->shm_why, sizeof m->shm_why,
             "shared memory within each of %d hosts (%d ranks each), MPI messages across", hosts,
             local_n);
  else if (hosts > 1)
    snprintf(m->shm_why, sizeof m->shm_why,
             "shared memory within each of %d hosts (%d to %d ranks), MPI messages across among "
             "the first %d of each",
             hosts, smallest, largest, smallest);
  else
    snprintf(m->shm_why, sizeof m->shm_why, "shared memory");
  return 0;
}

/* Decides, on the first all_reduce and the same way on every rank, whether
 * all_reduce goes through shared memory: none may have FG_MPI_SHM=0; the
 * ranks are grouped by host (the host name's hash; FG_MPI_HOST replaces
 * the name, to try several hosts on one machine); each host's first rank
 * creates its segment (named after its pid; slot size from its
 * FG_MPI_SHM_CHUNK) and every rank of the host attaches it. Ranks on
 * several hosts take hier_all_reduce unless every host holds one rank.
 * Three all-gathers under the deadline; each
 * creator unlinks its name after the last. Returns -1 only when a gather
 * fails (the communicator is broken then); any other failure leaves m->shm
 * NULL, with why in m->shm_why, and the MPI message path. Under m->mu. */
int fgm_shm_setup(mpi_comm *m, fg_status *st) {
  const int n = m->base.size, me = m->base.rank;
  m->shm_tried = 1;
  if (n < 2) {
    snprintf(m->shm_why, sizeof m->shm_why, "one rank: nothing to exchange");
    return 0;
  }
  uint64_t *all = m->gathered;
  char host[256] = "";
  const char *fake = getenv("FG_MPI_HOST");
  if (fake && *fake)
    snprintf(host, sizeof host, "%s", fake);
  else
    gethostname(host, sizeof host - 1);
  const char *env = getenv("FG_MPI_SHM");
  int off = env && strcmp(env, "0") == 0;
  /* Whether this rank reads the others' arenas in place
   * (fg_comm_mpi_shares_arenas): all must, or none does. */
  int no_arena = !arenas_allowed();
  uint64_t hh = fg_hash_bytes(FG_HASH_SEED, host, strlen(host));
  uint64_t mine = ((hh ^ (hh >> 32)) << 32) | ((uint64_t)getpid() & 0x3fffffffu) |
                  (no_arena ? (uint64_t)1 << 30 : 0) | (off ? (uint64_t)1 << 31 : 0);
  int rc = -1, hosts = 0, leader = 0, local_n = n;
  fg_shm_reduce *s = NULL;
  char name[64] = "";
  int *host_of = malloc(3 * (size_t)n * sizeof *host_of), *local = host_of ? host_of + n : NULL,
      *size = host_of ? host_of + 2 * (size_t)n : NULL;
  if (!host_of) {
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce setup: out of memory");
    fgm_set_broken(m); /* the others gather: this rank cannot follow */
    return -1;
  }
  if (fgm_gather_locked(m, mine, all, "all_reduce setup (shared memory)", st) != 0) goto out;
  rc = 0;
  int in_place = 1;
  for (int p = 0; p < n; p++)
    if (all[p] & ((uint64_t)1 << 30)) in_place = 0;
  for (int p = 0; p < n; p++)
    if (all[p] & ((uint64_t)1 << 31)) {
      snprintf(m->shm_why, sizeof m->shm_why, "rank %d has FG_MPI_SHM=0", p);
      goto out;
    }
  hosts = group_hosts(all, n, host_of, local, size);
  if (hosts == 0) {
    /* The others go on to the next gather: this rank cannot follow. */
    fg_status_set(st, FG_RESOURCE_EXHAUSTED, "all_reduce setup: out of memory");
    fgm_set_broken(m);
    rc = -1;
    goto out;
  }
  int smallest = n, largest = 0;
  for (int h = 0; h < hosts; h++) {
    smallest = size[h] < smallest ? size[h] : smallest;
    largest = size[h] > largest ? size[h] : largest;
  }
  if (largest == 1) {
    snprintf(m->shm_why, sizeof m->shm_why, "one rank on each of %d hosts", hosts);
    goto out;
  }
  local_n = size[host_of[me]];
  while (host_of[leader] != host_of[me] || local[leader] != 0)
    leader++;
  unsigned pid_leader = (unsigned)(all[leader] & 0x3fffffffu);
  /* Each host's first rank offers (serial << 32 | slot bytes), or 0 when
   * it could not create the segment. */
  uint64_t offer = 0;
  fg_status *why = fg_status_new();
  if (leader == me) {
    const char *ce = getenv("FG_MPI_SHM_CHUNK");
    size_t chunk = fg_shm_chunk_bytes(ce ? (size_t)strtoull(ce, NULL, 10) : 0);
    unsigned serial = atomic_fetch_add(&g_shm_serial, 1) + 1;
    snprintf(name, sizeof name, "/fg-mpi-%u-%u", pid_leader, serial);
    if (fg_shm_reduce_create(name, local_n, chunk, why) == 0) {
      offer = ((uint64_t)serial << 32) | (uint64_t)chunk;
    } else {
      snprintf(m->shm_why, sizeof m->shm_why, "%s", fg_status_message(why));
      name[0] = '\0'; /* not ours to unlink: it may be another job's */
    }
  }
  if (fgm_gather_locked(m, offer, all, "all_reduce setup (shared memory)", st) != 0) {
    fg_status_free(why);
    rc = -1;
    goto out;
  }
  /* Every rank looks at every host's offer, so all take the same path. */
  for (int p = 0; p < n; p++)
    if (local[p] == 0 && all[p] == 0) {
      if (p != me)
        snprintf(m->shm_why, sizeof m->shm_why, "rank %d could not create the segment", p);
      fg_status_free(why);
      goto out;
    }
  offer = all[leader];
  char seg[64];
  snprintf(seg, sizeof seg, "/fg-mpi-%u-%u", pid_leader, (unsigned)(offer >> 32));
  s = fg_shm_reduce_attach(seg, local[me], local_n, (size_t)(offer & 0xffffffffu), why);
  if (!s) snprintf(m->shm_why, sizeof m->shm_why, "%s", fg_status_message(why));
  fg_status_free(why);
  if (fgm_gather_locked(m, s != NULL, all, "all_reduce setup (shared memory)", st) != 0) {
    rc = -1;
    goto out;
  }
  int ok = 1;
  for (int p = 0; p < n && ok; p++)
    if (!all[p]) {
      ok = 0;
      if (s) snprintf(m->shm_why, sizeof m->shm_why, "rank %d could not map the segment", p);
    }
  if (ok && shm_install(m, &s, in_place, hosts, smallest, largest, local_n, host_of, local, size,
                        st) != 0) {
    rc = -1;
    goto out;
  }
out:
  if (!m->shm && strncmp(m->shm_why, "MPI messages", 12) != 0) {
    char reason[sizeof m->shm_why];
    snprintf(reason, sizeof reason, "%s", m->shm_why[0] ? m->shm_why : "setup failed");
    snprintf(m->shm_why, sizeof m->shm_why, "MPI messages (%.130s)", reason);
  }
  if (leader == me && name[0]) fg_shm_reduce_unlink(name);
  fg_shm_reduce_free(s);
  free(host_of);
  return rc;
}

/* The path all_reduce takes on c: "shared memory", "shared memory within
 * each of H hosts ...", or why it goes through
 * MPI messages ("not yet decided" before the first all_reduce). */
const char *fg_comm_mpi_reduce_path(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  if (!c || c->ops != &fgm_mpi_ops) return "not an MPI communicator";
  return !m->shm_tried ? "not yet decided" : m->shm_why;
}

int fg_comm_mpi_shares_arenas(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  if (!c || c->ops != &fgm_mpi_ops || c->size < 2 || (m->shm_tried && !m->shm)) return 0;
  return arenas_allowed();
}

int fg_comm_mpi_host_procs(const fg_comm *c) {
  if (!c || c->ops != &fgm_mpi_ops) return 1;
  static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *v = getenv(vars[i]);
    char *end;
    long n = v ? strtol(v, &end, 10) : 0;
    if (v && *v && !*end && n >= 1 && n <= 1 << 20) return (int)n;
  }
  return 1;
}

uint64_t fg_comm_mpi_in_place_count(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  return c && c->ops == &fgm_mpi_ops && m->shm ? fg_shm_reduce_in_place_count(m->shm) : 0;
}

uint64_t fg_comm_mpi_fused_count(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  return c && c->ops == &fgm_mpi_ops && m->shm ? fg_shm_reduce_fused_count(m->shm) : 0;
}

uint64_t fg_comm_mpi_message_bytes(const fg_comm *c) {
  const mpi_comm *m = (const mpi_comm *)c;
  if (!c || c->ops != &fgm_mpi_ops) return 0;
  pthread_mutex_lock((pthread_mutex_t *)&m->mu);
  uint64_t b = m->msg_bytes;
  pthread_mutex_unlock((pthread_mutex_t *)&m->mu);
  return b;
}

#endif
