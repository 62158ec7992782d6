/* The backend table and the CPU rows: see backend.h. The CUDA row is in
 * backend_cuda.c. */
#include "executor/backend.h"

#include "kernels/kernel.h"

extern const fg_backend fg_backend_cpu, fg_backend_cuda, fg_backend_host;

const fg_backend *const fg_backends[] = {&fg_backend_cpu, &fg_backend_cuda, &fg_backend_host, NULL};

const fg_backend *fg_backend_for(const fg_backend *const *table, const fg_backend_query *q) {
  for (int i = 0; table[i]; i++)
    if (table[i]->runs(q)) return table[i];
  return NULL;
}

static fg_kernel_fn cpu_kernel(const fg_backend_query *q) {
  return fg_cpu_kernel(q->def->name, q->key);
}

static const fg_kprep *cpu_prep(const fg_backend_query *q) {
  return fg_cpu_kernel_prep(q->def->name, q->key);
}

static int cpu_supports(const fg_backend_query *q, char *why, size_t why_size) {
  (void)why, (void)why_size;
  return cpu_kernel(q) != NULL;
}

/* A CPU plan: every step. */
static int cpu_runs(const fg_backend_query *q) { return !q->req->cuda; }

const fg_backend fg_backend_cpu = {"CPU",        "the CPU",  0,       cpu_runs,
                                   cpu_supports, cpu_kernel, cpu_prep};

/* Host steps: in a GPU plan, the nodes placed on a CPU device
 * (fg_plan_request.host_nodes) run their CPU kernel on host copies of
 * their inputs, which the CUDA executor stages. */
static int host_runs(const fg_backend_query *q) {
  return q->req->cuda && q->req->host_nodes && q->req->host_nodes[q->id];
}

const fg_backend fg_backend_host = {"CPU",        "the host", 1,       host_runs,
                                    cpu_supports, cpu_kernel, cpu_prep};
