/* Two hosts on this machine for MPI tests (tools/netns_hosts.sh): network
 * namespaces with host names of their own, joined by a veth link. A test
 * brings them up with NETNS_HOSTS_REQUIRED, passes `where` to mpirun_at and
 * takes them down with netns_hosts_down. Names carry the test's pid, so
 * tests running side by side (ctest -j) get hosts of their own. */
#ifndef FG_TEST_NETNS_HOSTS_H
#define FG_TEST_NETNS_HOSTS_H

#include <sys/stat.h>

#include "mpi_run.h"

#define NETNS_HOSTS_SCRIPT FG_SOURCE_DIR "/tools/netns_hosts.sh"

typedef struct netns_hosts {
  char prefix[16];
  char slots[24];
  char host[2][24];
  /* mpirun on the first host with the slots above, printing its map of
   * ranks to hosts (netns_hosts_procs): for mpirun_at. */
  const char *where[7];
} netns_hosts;

/* The script's `cmd` for these hosts (with `arg` when not NULL); its exit
 * status, its output left in `res`. */
static inline int netns_hosts_script(const netns_hosts *h, const char *cmd, const char *arg,
                                     run_result *res) {
  char *argv[] = {"/bin/sh", NETNS_HOSTS_SCRIPT, (char *)cmd, (char *)h->prefix, (char *)arg, NULL};
  run_limited(argv, 60, res);
  return res->status;
}

/* Brings the two hosts up, for mpirun with slots0 slots on the first and
 * slots1 on the second; 0, or with the reason in `why` -1 where this
 * machine cannot make them (not root; the script's exit status 77: no
 * iproute2, unshare, namespaces or veth) and -2 where making them failed
 * otherwise. */
static inline int netns_hosts_up2(netns_hosts *h, int slots0, int slots1, char *why,
                                  size_t why_len) {
  memset(h, 0, sizeof *h);
  const long tag = (long)getpid() % 100000000L;
  snprintf(h->prefix, sizeof h->prefix, "fg%ld", tag);
  snprintf(h->slots, sizeof h->slots, "%d,%d", slots0, slots1);
  for (int i = 0; i < 2; i++)
    snprintf(h->host[i], sizeof h->host[i], "fg%ldh%d", tag, i);
  if (geteuid() != 0) {
    snprintf(why, why_len, "not root (network namespaces need CAP_SYS_ADMIN)");
    return -1;
  }
  run_result *res = malloc(sizeof *res);
  if (!res) {
    snprintf(why, why_len, "out of memory");
    return -1;
  }
  /* Hosts that earlier test runs left behind go first (the script's
   * sweep: names fg<pid>h0/h1 whose pid is gone). */
  netns_hosts h_stem = {.prefix = "fg"};
  netns_hosts_script(&h_stem, "sweep", NULL, res);
  int rc = netns_hosts_script(h, "up", NULL, res);
  /* The script's last words are its reason (at most 300 characters). */
  if (rc != 0) {
    size_t n = strlen(res->out);
    snprintf(why, why_len, "%s up failed (%d): %.300s", NETNS_HOSTS_SCRIPT, rc,
             res->out + (n > 300 ? n - 300 : 0));
  }
  free(res);
  if (rc != 0) return rc == 77 ? -1 : -2;
  const char *where[] = {"/bin/sh", NETNS_HOSTS_SCRIPT, "mpirun", h->prefix,
                         h->slots,  "--display-map",    NULL};
  memcpy(h->where, where, sizeof where);
  return 0;
}

/* The same with `slots` slots on each host. */
static inline int netns_hosts_up(netns_hosts *h, int slots, char *why, size_t why_len) {
  return netns_hosts_up2(h, slots, slots, why, why_len);
}

/* Kills whatever runs on the two hosts and removes them. */
static inline void netns_hosts_down(netns_hosts *h) {
  run_result *res = malloc(sizeof *res);
  if (res && netns_hosts_script(h, "down", NULL, res) != 0)
    fprintf(stderr, "netns_hosts down %s: %s\n", h->prefix, res->out);
  free(res);
}

/* Brings the link between the hosts up (1) or down (0); 0 or -1. */
static inline int netns_hosts_link(netns_hosts *h, int up) {
  run_result *res = malloc(sizeof *res);
  int rc = res ? netns_hosts_script(h, "link", up ? "up" : "down", res) : -1;
  if (rc != 0) fprintf(stderr, "netns_hosts link %s: %s\n", h->prefix, res ? res->out : "");
  free(res);
  return rc == 0 ? 0 : -1;
}

/* How many ranks mpirun's map (in `out`) put on host i, or -1. */
static inline int netns_hosts_procs(const netns_hosts *h, const char *out, int i) {
  char key[64];
  snprintf(key, sizeof key, "Data for node: %s\t", h->host[i]);
  const char *p = strstr(out, key);
  const char *eol = p ? strchr(p, '\n') : NULL;
  const char *n = p ? strstr(p, "Num procs: ") : NULL;
  if (!n || (eol && n > eol)) return -1;
  return atoi(n + strlen("Num procs: "));
}

/* Whether mpirun's map (in `out`) put ranks on both hosts. */
static inline int netns_hosts_both_used(const netns_hosts *h, const char *out) {
  return netns_hosts_procs(h, out, 0) > 0 && netns_hosts_procs(h, out, 1) > 0;
}

/* Which of the two hosts process `pid` runs on (its network namespace is
 * the host's), or -1. */
static inline int netns_hosts_of(const netns_hosts *h, pid_t pid) {
  char path[64];
  struct stat mine, host;
  snprintf(path, sizeof path, "/proc/%ld/ns/net", (long)pid);
  if (stat(path, &mine) != 0) return -1;
  for (int i = 0; i < 2; i++) {
    char hp[64];
    snprintf(hp, sizeof hp, "/run/netns/%s", h->host[i]);
    if (stat(hp, &host) == 0 && host.st_ino == mine.st_ino && host.st_dev == mine.st_dev) return i;
  }
  return -1;
}

/* Skips visibly where this machine cannot make two such hosts (not root,
 * no iproute2, a kernel or sandbox without network namespaces or veth);
 * fails where making them failed otherwise. */
#define NETNS_HOSTS_REQUIRED(h, slots) NETNS_HOSTS_REQUIRED2(h, slots, slots)
#define NETNS_HOSTS_REQUIRED2(h, slots0, slots1)                                                   \
  do {                                                                                             \
    static char why_[512];                                                                         \
    int up_ = netns_hosts_up2((h), (slots0), (slots1), why_, sizeof why_);                         \
    if (up_ == -1) FG_SKIP("no two hosts in network namespaces here: %s", why_);                   \
    if (up_ != 0) {                                                                                \
      FG_FAIL_AT("two hosts in network namespaces: %s", why_);                                     \
      return;                                                                                      \
    }                                                                                              \
  } while (0)

#endif
