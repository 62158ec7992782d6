/* The host side of the fused_elementwise CUDA kernel: from a parsed program
 * (fg_fused_params) and the shapes and dtypes of a step, the CUDA C source
 * of one __global__ kernel for that group, and the arguments to launch it
 * with. Plain C, compiled in every build (CUDA or not), so the generated
 * text and its validity are tested on machines without a GPU; NVRTC turns
 * the text into machine code (kernels/cuda/nvrtc_cache.h), and
 * kernels/cuda/fused.cu launches it.
 *
 * The text depends only on the group's structure: the program, the output
 * dtype, each input's dtype and broadcast kind, and the rank of the
 * coalesced walk that the strided inputs share. Sizes and strides travel
 * in the launch arguments, so one compiled kernel serves every batch size,
 * and the text (plus the target architecture) is the compile cache's key. */
#ifndef FG_CUDA_FUSED_CODEGEN_H
#define FG_CUDA_FUSED_CODEGEN_H

#include <stddef.h>

#include "flowgraph/op_params.h"
#include "kernels/kernel.h"

#ifdef __cplusplus
extern "C" {
#endif

/* How the kernel finds input k's element for flat output index i. */
typedef enum fgc_fused_kind {
  FGC_FUSED_UNUSED = 0, /* the program never reads the input: no load */
  FGC_FUSED_FULL,       /* the output's shape: element i */
  FGC_FUSED_SCALAR,     /* one element, loaded once per thread */
  FGC_FUSED_SUFFIX,     /* broadcast along leading dims only (a bias row): element i % m[k] */
  FGC_FUSED_PREFIX,     /* broadcast along trailing dims only (a [N, 1] column): i / m[k] */
  FGC_FUSED_WALK        /* anything else: the coalesced walk (dims, strides[k]) */
} fgc_fused_kind;

/* The structure the source is generated from. */
typedef struct fgc_fused_layout {
  fg_dtype out_dtype; /* FG_F32 or FG_F64: the compute type */
  int n_inputs;
  fg_dtype in_dtype[FG_FUSED_MAX_INPUTS]; /* FG_F32, FG_F64 or FG_BOOL */
  int kind[FG_FUSED_MAX_INPUTS];          /* fgc_fused_kind */
  int walk_rank;                          /* dims of the walk the WALK inputs share; 0 when none */
} fgc_fused_layout;

/* The launch argument, passed by value; the generated source declares the
 * same struct (the same member types in the same order), so the two
 * layouts agree on any ABI the host compiler and NVRTC share. */
typedef struct fgc_fused_args {
  void *out;
  const void *in[FG_FUSED_MAX_INPUTS];
  long long n;                      /* output elements */
  long long m[FG_FUSED_MAX_INPUTS]; /* SUFFIX: the input's elements; PREFIX: n / those */
  long long dims[FG_MAX_RANK];      /* the walk's coalesced dims, outermost first */
  long long strides[FG_FUSED_MAX_INPUTS][FG_MAX_RANK]; /* WALK inputs' element strides */
  long long vec; /* 1: the 4-wide loop runs (fgc_fused_vec_ok), set per call */
} fgc_fused_args;

/* The generated kernel's name (extern "C", so unmangled). */
#define FGC_FUSED_ENTRY "fg_fused"

/* Checks the program against the step and classifies its inputs: n_in
 * inputs and one output, f32 or f64; each input f32, f64 or bool and
 * broadcastable to the output (NumPy rules); every instruction's opcode,
 * argument count and references in range (inputs < n_inputs == n_in,
 * temporaries earlier, constants < n_consts). Fills *lay and every field
 * of *args but the pointers. 0, or -1 with a message naming the
 * instruction, input or dims in err. Data pointers are not read: this
 * runs at plan time on shapes alone. */
int fgc_fused_plan(const fg_fused_params *p, const fg_kbuf *in, int n_in, const fg_kbuf *out,
                   int n_out, fgc_fused_layout *lay, fgc_fused_args *args, char *err,
                   size_t err_size);

/* The CUDA C++ source of the kernel for (p, lay), NUL-terminated, from
 * malloc (the caller frees it); NULL when out of memory. p and lay must
 * have passed fgc_fused_plan. The same inputs give the same bytes. */
char *fgc_fused_source(const fg_fused_params *p, const fgc_fused_layout *lay);

/* 1 when the kernel of lay may take its 4-wide loop for args (pointers
 * set): no strided walk, the bias-row and column inputs' rows multiples of
 * 4 elements, and the output and every full or bias-row input aligned to
 * 4 elements. */
int fgc_fused_vec_ok(const fgc_fused_layout *lay, const fgc_fused_args *args);

/* The name of an opcode as the program text spells it ("add",
 * "leaky_relu"); "?" out of range. */
const char *fgc_fused_op_name(int op);

#ifdef __cplusplus
}
#endif
#endif
