/* flowgraph: building and reading graphs.
 *
 * A graph owns its nodes. Every builder call appends one node and returns an
 * fg_output (node id plus output index). The first error is kept on the graph
 * ("sticky"): later builder calls do nothing and return FG_NO_OUTPUT, and
 * fg_graph_status() and fg_session_new() report that first error. So nested
 * calls such as fg_relu(g, fg_add(g, fg_matmul(g, x, w, 0, 0), b)) need one
 * check at the end.
 *
 * Names: every node has a unique name. Builders name nodes "<op>_<n>"; rename
 * with fg_set_name(). Devices: a node is placed with fg_set_device() (or by
 * the device field of a .fgb file) or left unplaced; the placer of
 * flowgraph/dist.h decides where unplaced nodes run.
 *
 * Shapes: FG_DIM_UNKNOWN (-1) may appear as the leading dimension of a
 * placeholder; shape inference carries it through and the session resolves
 * it from the feed at run time.
 */
#ifndef FLOWGRAPH_GRAPH_H
#define FLOWGRAPH_GRAPH_H

#include "flowgraph/status.h"
#include "flowgraph/tensor.h"
#include "flowgraph/types.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct fg_graph fg_graph;

/* One output of one node. node < 0 means "no output" (an error happened). */
typedef struct fg_output {
  int node;
  int index;
} fg_output;

#define FG_NO_OUTPUT ((fg_output){-1, 0})

FG_API fg_graph *fg_graph_new(void);
/* Accepts NULL. */
FG_API void fg_graph_free(fg_graph *g);
/* Copies the graph's sticky error (or OK) into `status`; returns its code.
 * A NULL graph gives FG_INVALID_ARGUMENT. */
FG_API fg_code fg_graph_status(const fg_graph *g, fg_status *status);
/* Increments on every change; sessions use it to notice edits. */
FG_API uint64_t fg_graph_version(const fg_graph *g);

/* ---- attributes, for the generic builder fg_op() ------------------------ */

typedef enum fg_attr_type {
  FG_ATTR_INT = 1, /* also bools and dtypes */
  FG_ATTR_FLOAT = 2,
  FG_ATTR_STRING = 3,
  FG_ATTR_INTS = 4, /* also shapes, axes, perms */
  FG_ATTR_FLOATS = 5,
  FG_ATTR_TENSOR = 6
} fg_attr_type;

typedef struct fg_attrs fg_attrs;
FG_API fg_attrs *fg_attrs_new(void);
FG_API void fg_attrs_free(fg_attrs *a); /* accepts NULL */
/* Setters copy their arguments; setting a name twice replaces the value.
 * They return 0, or -1 when out of memory or `a`/`name` is NULL. */
FG_API int fg_attrs_set_int(fg_attrs *a, const char *name, int64_t v);
FG_API int fg_attrs_set_float(fg_attrs *a, const char *name, double v);
FG_API int fg_attrs_set_string(fg_attrs *a, const char *name, const char *v);
FG_API int fg_attrs_set_ints(fg_attrs *a, const char *name, const int64_t *v, int n);
FG_API int fg_attrs_set_floats(fg_attrs *a, const char *name, const double *v, int n);
FG_API int fg_attrs_set_tensor(fg_attrs *a, const char *name, const fg_tensor *v);

/* The generic builder: appends a node running op `op` (a name from the op
 * table, such as "add"), named `name` (NULL: automatic) on `inputs`, with
 * `attrs` (NULL: none), then infers its outputs' dtypes and shapes. Unknown
 * ops give FG_UNIMPLEMENTED; bad inputs and attributes FG_INVALID_GRAPH. */
FG_API fg_output fg_op(fg_graph *g, const char *op, const char *name, const fg_output *inputs,
                       int n_inputs, const fg_attrs *attrs);
/* Output `index` of the same node as `o` (for multi-output ops). */
FG_API fg_output fg_output_at(fg_output o, int index);

/* Renames / places the node that produced `o`; returns `o`. Metadata that
 * names a node ("loss" and "train_target", as fg_minimize records them)
 * follows the rename: it keeps naming the same node. */
FG_API fg_output fg_set_name(fg_graph *g, fg_output o, const char *name);
FG_API fg_output fg_set_device(fg_graph *g, fg_output o, const char *device);

/* ---- sources ------------------------------------------------------------ */
FG_API fg_output fg_placeholder(fg_graph *g, const char *name, fg_dtype dtype, int rank,
                                const int64_t *dims);
/* The value is copied into the graph. */
FG_API fg_output fg_constant(fg_graph *g, const char *name, const fg_tensor *value);
FG_API fg_output fg_scalar(fg_graph *g, fg_dtype dtype, double value);
/* A persistent value; the session owns its current value, starting from a
 * copy of `initial`. */
FG_API fg_output fg_variable(fg_graph *g, const char *name, const fg_tensor *initial);
/* A new value for variable `name` of a built graph (copied), as
 * TensorFlow's Variable.load: sessions made on g afterwards start from it,
 * and a saved g keeps it. The dtype and shape must be the variable's. 0, or
 * -1 with status set (no such node, not a variable, another dtype or shape). */
FG_API int fg_variable_set_value(fg_graph *g, const char *name, const fg_tensor *value,
                                 fg_status *status);
FG_API fg_output fg_fill(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims, double value);
/* Seeded random tensors (f32 or f64, every dim known). Element i depends
 * only on (seed, the node's stream, i): the same values for any thread
 * count and on the GPU. The stream is a hash of the node's name (attribute
 * "stream" -1), so nodes named differently draw differently with one seed;
 * renaming a node changes its values. Uniform in [low, high), low < high. */
FG_API fg_output fg_random_uniform(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims,
                                   double low, double high, int64_t seed);
/* Normal with the given mean and stddev > 0 (Box-Muller). */
FG_API fg_output fg_random_normal(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims,
                                  double mean, double stddev, int64_t seed);
/* As fg_random_normal, with values beyond 2 stddev of the mean redrawn
 * (TensorFlow's truncated_normal). */
FG_API fg_output fg_truncated_normal(fg_graph *g, fg_dtype dtype, int rank, const int64_t *dims,
                                     double mean, double stddev, int64_t seed);

/* ---- initialisers -------------------------------------------------------
 * A variable made by fg_variable_init holds no initial bytes in the graph:
 * its initialiser is attributes of the node ("init", "init_a", "init_b",
 * "init_fan_out", "seed", "stream", "dtype", "shape"), drawn once when a
 * session is made (and for variables added to the graph later, when the
 * session first sees them). A saved .fgb or JSON keeps the attributes, not
 * values, so its size does not grow with the variable's. fg_session_save
 * writes the current values too ("value"); a variable that has a value
 * starts at it, so a checkpoint resumes with the trained weights.
 *
 * The values are torch.nn.init's formulas on flowgraph's generator: element
 * i is element i of fg_random_uniform / fg_random_normal with the same seed
 * and stream (Philox4x32-10, kernels/philox.h; stream: the "stream"
 * attribute, which fg_variable_init sets to the 32-bit FNV-1a hash of the
 * node's name as given, so data-parallel copies of the variable, renamed
 * "replica_r/...", start equal). The same seed gives the same bits on any
 * machine, thread count and device; torch's own generator differs, so the
 * values match torch in distribution, not bit for bit.
 *
 * Fans as torch.nn.init._calculate_fan_in_and_fan_out: rank >= 2 (rank 1 is
 * refused, as torch refuses it); conv weight [O, I, kh, kw]: fan_in = I kh kw,
 * fan_out = O kh kw; linear weight [out, in]: fan_in = in, fan_out = out. */
typedef enum fg_init_kind {
  FG_INIT_ZEROS,
  FG_INIT_ONES,
  FG_INIT_CONSTANT,
  FG_INIT_UNIFORM,
  FG_INIT_NORMAL,
  FG_INIT_KAIMING_UNIFORM, /* bound = gain sqrt(3 / fan), gain = sqrt(2 / (1 + a^2)) */
  FG_INIT_KAIMING_NORMAL,  /* std = gain / sqrt(fan) */
  FG_INIT_XAVIER_UNIFORM,  /* bound = gain sqrt(6 / (fan_in + fan_out)) */
  FG_INIT_XAVIER_NORMAL    /* std = gain sqrt(2 / (fan_in + fan_out)) */
} fg_init_kind;
typedef struct fg_init {
  fg_init_kind kind;
  /* constant: a; uniform: [a, b); normal: mean a, std b > 0; kaiming:
   * negative slope a (leaky_relu's gain; 0 = relu); xavier: the gain a
   * (0 means 1, torch's default; fg_init_gain gives calculate_gain's). */
  double a, b;
  int fan_out; /* kaiming: 1 for mode='fan_out', 0 for 'fan_in' */
  int64_t seed;
} fg_init;
/* A variable of `dtype` (f32 or f64 for the kinds that draw; any for zeros,
 * ones and constant) and shape `dims`, initialised by `init`. A bad kind,
 * shape or number fails the graph naming the node and the value. */
FG_API fg_output fg_variable_init(fg_graph *g, const char *name, fg_dtype dtype, int rank,
                                  const int64_t *dims, const fg_init *init);
/* torch.nn.init._calculate_fan_in_and_fan_out: 0, or -1 when rank < 2. */
FG_API int fg_init_fans(int rank, const int64_t *dims, int64_t *fan_in, int64_t *fan_out);
/* torch.nn.init.calculate_gain: "linear", "conv1d".."conv_transpose3d",
 * "sigmoid" 1; "tanh" 5/3; "relu" sqrt(2); "leaky_relu" sqrt(2 / (1 +
 * param^2)); "selu" 3/4. NaN for any other name. */
FG_API double fg_init_gain(const char *nonlinearity, double param);

/* ---- training mode and dropout -------------------------------------------
 * One graph serves training and inference: ops that behave differently
 * (dropout, batch norm) take the graph's training flag as a bool input.
 * fg_training returns it: a node named "training" (op training_flag, made
 * on the first call, found by name after; a node of that name of another
 * op fails the graph). Its value in a run:
 * - fed (fg_session_run with a feed named "training", a bool scalar):
 *   the fed value;
 * - else true in a run that applies an optimizer update (apply_sgd,
 *   apply_momentum, apply_adam and the data-parallel fused updates: the
 *   train op fg_minimize makes, and so `flowgraph train`), and false in
 *   every other run (a fetch of the loss or the predictions,
 *   `flowgraph run`, `--eval` in train).
 * A plan is per (feeds, fetches, targets), so the mode of an unfed run is
 * fixed at plan time; fed, it is read per run.
 *
 * Training steps: a session counts the runs whose training value was true
 * (successful ones): run k (from 0) draws dropout masks keyed by step k.
 * fg_session_save writes the count in the graph's metadata
 * ("training_steps"), and a session made on a loaded file starts from it,
 * so a resumed training draws the masks it would have drawn uninterrupted.
 * Sessions on one graph in memory count separately. */
FG_API fg_output fg_training(fg_graph *g);
/* training ? x * mask / (1 - p) : x, for x f32 or f64 and training a bool
 * scalar (normally fg_training(g)); p in [0, 1), refused otherwise naming
 * the node and p. mask[i] = 1 with probability 1 - p, from Philox4x32-10
 * keyed by (seed, stream, training step, replica) (kernels/philox.h,
 * fg_dropout_keep4): the same mask for any thread count and on the GPU,
 * a new one each training step, and one per data-parallel replica
 * (fg_data_parallel gives each replica's copy its own "replica", and
 * fg_micro_batch each micro-batch's; with one process per replica, the
 * process's replica rank is folded in). The
 * stream is a hash of the node's name (attribute "stream" -1; fixed when
 * gradients are taken, so the gradient's mask is the forward's). The
 * kept elements are x * (1 / (1 - p)), the factor rounded to x's type. */
FG_API fg_output fg_dropout(fg_graph *g, fg_output x, fg_output training, double p, int64_t seed);
/* One seed for every random draw of the graph (torch.manual_seed's role):
 * each node that draws (random_uniform, random_normal, truncated_normal,
 * dropout and its gradient, and variables drawn by an initialiser rather
 * than holding a value) gets a new "seed" attribute, a function (splitmix64)
 * of `seed` and its own seed. So the same seed gives the same bits, another
 * seed other draws, and a dropout and its gradient keep one mask. Streams
 * (from names) are untouched. Fused nodes written by fg_optimize keep their
 * seeds. Call it before making a session on the graph. Returns how many
 * nodes it reseeded (0: the graph draws nothing), or -1 with status set. */
FG_API int fg_graph_reseed(fg_graph *g, int64_t seed, fg_status *status);

/* ---- linear algebra and shaping ----------------------------------------- */
/* Batched over leading dimensions (which broadcast); 1-D operands are not
 * promoted: both need rank >= 2. */
FG_API fg_output fg_matmul(fg_graph *g, fg_output a, fg_output b, int transpose_a, int transpose_b);
/* One dimension may be -1 (inferred). */
FG_API fg_output fg_reshape(fg_graph *g, fg_output x, int rank, const int64_t *dims);
FG_API fg_output fg_transpose(fg_graph *g, fg_output x, int rank, const int64_t *perm);
FG_API fg_output fg_concat(fg_graph *g, const fg_output *xs, int n, int axis);
/* size[i] == -1 means "to the end". */
FG_API fg_output fg_slice(fg_graph *g, fg_output x, int rank, const int64_t *begin,
                          const int64_t *size);
/* Rows of `params` (axis 0) picked by integer `indices`; out shape is
 * indices.shape + params.shape[1:]. */
FG_API fg_output fg_gather(fg_graph *g, fg_output params, fg_output indices);
FG_API fg_output fg_one_hot(fg_graph *g, fg_output indices, int64_t depth, fg_dtype dtype);
FG_API fg_output fg_cast(fg_graph *g, fg_output x, fg_dtype dtype);

/* ---- binary, NumPy broadcasting ----------------------------------------- */
FG_API fg_output fg_add(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_sub(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_mul(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_div(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_pow(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_maximum(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_minimum(fg_graph *g, fg_output a, fg_output b);
/* Comparisons return bool. */
FG_API fg_output fg_equal(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_greater(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_less(fg_graph *g, fg_output a, fg_output b);
/* cond ? a : b, all three broadcast. */
FG_API fg_output fg_select(fg_graph *g, fg_output cond, fg_output a, fg_output b);
/* Logic on bool operands, bool out (a number is refused: compare it first);
 * the binary ones broadcast. Not differentiable. */
FG_API fg_output fg_logical_not(fg_graph *g, fg_output x);
FG_API fg_output fg_logical_and(fg_graph *g, fg_output a, fg_output b);
FG_API fg_output fg_logical_or(fg_graph *g, fg_output a, fg_output b);

/* act(op(a) @ op(b) + bias) in one node: matmul's shapes and transposes,
 * bias of shape [N] (the product's last dim) added to every row, then
 * activation "none" or "relu" (NULL: none). The epilogue pass makes these
 * from matmul -> add -> relu chains; the bits are those of the chain. Not
 * differentiable. */
FG_API fg_output fg_fused_matmul(fg_graph *g, fg_output a, fg_output b, fg_output bias,
                                 int transpose_a, int transpose_b, const char *activation);

/* relu's gradient of a product in one node: op(a) @ op(b) (matmul's
 * shapes and transposes) where y > 0, else 0, with y of the product's
 * shape and dtype (relu's output; NaN and -0.0 are not > 0). The
 * grad_epilogue pass makes these from select(greater(y, 0), matmul, 0);
 * the bits are those of the chain. Not differentiable. */
FG_API fg_output fg_fused_matmul_relu_grad(fg_graph *g, fg_output a, fg_output b, fg_output y,
                                           int transpose_a, int transpose_b);
/* A dense layer's weight and bias gradients in one node: output 0 is
 * a^T @ dz ([K, N]), output 1 the sum of dz's rows ([N]), for a [R, K]
 * and dz [R, N]. Returns output 0; output 1 is {node, 1}. Not
 * differentiable. */
FG_API fg_output fg_matmul_bias_grad(fg_graph *g, fg_output a, fg_output dz);

/* ---- unary -------------------------------------------------------------- */
FG_API fg_output fg_neg(fg_graph *g, fg_output x);
FG_API fg_output fg_exp(fg_graph *g, fg_output x);
FG_API fg_output fg_log(fg_graph *g, fg_output x);
FG_API fg_output fg_sqrt(fg_graph *g, fg_output x);
FG_API fg_output fg_rsqrt(fg_graph *g, fg_output x);
FG_API fg_output fg_abs(fg_graph *g, fg_output x);
FG_API fg_output fg_tanh(fg_graph *g, fg_output x);
FG_API fg_output fg_sigmoid(fg_graph *g, fg_output x);
FG_API fg_output fg_relu(fg_graph *g, fg_output x);
FG_API fg_output fg_leaky_relu(fg_graph *g, fg_output x, double alpha);
/* x > 0 ? x : alpha * (e^x - 1), as torch.nn.ELU (alpha 1 there). */
FG_API fg_output fg_elu(fg_graph *g, fg_output x, double alpha);
/* PyTorch's activations (torch.nn.functional), same formulas and defaults:
 * softplus: beta x > threshold ? x : log1p(e^(beta x)) / beta (torch:
 * beta 1, threshold 20); selu with torch's fixed alpha and scale; silu
 * x sigmoid(x); hard_sigmoid relu6(x + 3) / 6; hard_swish x hard_sigmoid(x);
 * mish x tanh(softplus(x)). */
FG_API fg_output fg_softplus(fg_graph *g, fg_output x, double beta, double threshold);
FG_API fg_output fg_selu(fg_graph *g, fg_output x);
FG_API fg_output fg_silu(fg_graph *g, fg_output x);
FG_API fg_output fg_hard_sigmoid(fg_graph *g, fg_output x);
FG_API fg_output fg_hard_swish(fg_graph *g, fg_output x);
FG_API fg_output fg_mish(fg_graph *g, fg_output x);
/* -1, 0 or 1 (f32, f64, i32, i64; NaN gives 0); zero gradient. */
FG_API fg_output fg_sign(fg_graph *g, fg_output x);
FG_API fg_output fg_reciprocal(fg_graph *g, fg_output x);
/* floor, ceil and round (halves to even, as torch.round): zero gradient. */
FG_API fg_output fg_floor(fg_graph *g, fg_output x);
FG_API fg_output fg_ceil(fg_graph *g, fg_output x);
FG_API fg_output fg_round(fg_graph *g, fg_output x);
/* min(max(x, min), max), NaN kept (torch.clamp); min > max is refused. */
FG_API fg_output fg_clip(fg_graph *g, fg_output x, double min, double max);
/* The exact (erf) form, as PyTorch's default. */
FG_API fg_output fg_gelu(fg_graph *g, fg_output x);
/* The tanh approximation, x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))) / 2
 * (PyTorch's approximate='tanh', ONNX Gelu's approximate="tanh", GPT-2's
 * gelu_new). */
FG_API fg_output fg_gelu_tanh(fg_graph *g, fg_output x);
FG_API fg_output fg_identity(fg_graph *g, fg_output x);
FG_API fg_output fg_stop_gradient(fg_graph *g, fg_output x);
FG_API fg_output fg_zeros_like(fg_graph *g, fg_output x);
FG_API fg_output fg_ones_like(fg_graph *g, fg_output x);

/* ---- reductions (n_axes == 0: all axes; negative axes count from the end) */
FG_API fg_output fg_reduce_sum(fg_graph *g, fg_output x, const int64_t *axes, int n_axes,
                               int keepdims);
FG_API fg_output fg_reduce_mean(fg_graph *g, fg_output x, const int64_t *axes, int n_axes,
                                int keepdims);
FG_API fg_output fg_reduce_max(fg_graph *g, fg_output x, const int64_t *axes, int n_axes,
                               int keepdims);
/* i64 indices of the first maximum along `axis` (removed from the shape). */
FG_API fg_output fg_argmax(fg_graph *g, fg_output x, int axis);
/* Minimum and product over `axes`, as fg_reduce_max (the min of nothing is
 * +inf or the type's maximum, the product of nothing 1). */
FG_API fg_output fg_reduce_min(fg_graph *g, fg_output x, const int64_t *axes, int n_axes,
                               int keepdims);
FG_API fg_output fg_reduce_prod(fg_graph *g, fg_output x, const int64_t *axes, int n_axes,
                                int keepdims);
/* i64 indices of the first minimum along `axis` (removed from the shape). */
FG_API fg_output fg_argmin(fg_graph *g, fg_output x, int axis);
/* log(sum(exp(x))) over `axes` (torch.logsumexp), computed shifted by the
 * maximum so that large inputs do not overflow; f32 and f64. */
FG_API fg_output fg_logsumexp(fg_graph *g, fg_output x, const int64_t *axes, int n_axes,
                              int keepdims);
/* Running sum along `axis` (ONNX CumSum): exclusive leaves x[i] out of
 * out[i]; reverse sums from the end of the axis. */
FG_API fg_output fg_cumsum(fg_graph *g, fg_output x, int axis, int exclusive, int reverse);
/* The k largest (smallest when largest is 0) along `axis` (torch.topk),
 * best first, ties to the lower index: output 0 the values, fg_output_at(o,
 * 1) their i64 indices. 0 <= k <= x's dim at axis. sorted is accepted for
 * torch's signature; the values always come sorted. */
FG_API fg_output fg_topk(fg_graph *g, fg_output x, int64_t k, int axis, int largest, int sorted);

/* ---- softmax family ----------------------------------------------------- */
FG_API fg_output fg_softmax(fg_graph *g, fg_output x, int axis);
FG_API fg_output fg_log_softmax(fg_graph *g, fg_output x, int axis);
/* logits [N, C] float, labels [N] i32/i64: mean over N of
 * -log_softmax(logits)[n, labels[n]]; a scalar. */
FG_API fg_output fg_softmax_cross_entropy(fg_graph *g, fg_output logits, fg_output labels);

/* ---- shape ops of CNNs and ONNX models ---------------------------------- *
 * Attributes mean what ONNX says where PyTorch differs. pads: 2 * rank
 * entries, >= 0, every dim's begin then every dim's end (ONNX; not
 * torch.nn.functional.pad's last-dim-first pairs); mode "constant" (fill
 * with value), "reflect" (mirror without the edge; each pad below its dim)
 * or "edge" (torch's "replicate"). flatten: [prod(dims[:axis]),
 * prod(dims[axis:])], axis in [-rank, rank]. squeeze: drops the size-1 dims
 * at axes (n_axes 0: every size-1 dim, all dims known); unsqueeze inserts
 * size-1 dims at axes, positions in the output. expand: x broadcast with
 * dims both ways (ONNX Expand: a 1 in dims keeps x's dim). tile: repeats,
 * one per dim. split: sizes[n] along axis, or with sizes NULL n parts of
 * ceil(dim / n), the last taking what is left (ONNX num_outputs); writes
 * n outputs to outs and returns 0, or -1 (the graph's error says why).
 * stack: n inputs of one shape along a new axis in [-rank - 1, rank]. For
 * where(cond, a, b), use fg_select. */
FG_API fg_output fg_pad(fg_graph *g, fg_output x, const int64_t *pads, const char *mode,
                        double value);
FG_API fg_output fg_flatten(fg_graph *g, fg_output x, int axis);
FG_API fg_output fg_squeeze(fg_graph *g, fg_output x, const int64_t *axes, int n_axes);
FG_API fg_output fg_unsqueeze(fg_graph *g, fg_output x, const int64_t *axes, int n_axes);
FG_API fg_output fg_expand(fg_graph *g, fg_output x, int rank, const int64_t *dims);
FG_API fg_output fg_tile(fg_graph *g, fg_output x, const int64_t *repeats, int n);
FG_API int fg_split(fg_graph *g, fg_output x, int axis, const int64_t *sizes, int n,
                    fg_output *outs);
FG_API fg_output fg_stack(fg_graph *g, const fg_output *xs, int n, int axis);
/* ---- pooling (NCHW, torch.nn.functional's semantics) ---------------------- */
/* Window options, fg_pool2d_opts (flowgraph/types.h). kernel (kh, kw) >= 1;
 * strides 0 means the kernel (torch's default); pads are top, left, bottom,
 * right, each <= kernel/2 of its dim; dilations 0 means 1 (max_pool2d only;
 * avg_pool2d refuses any other than 0 or 1); ceil_mode 1 rounds the output
 * size up, keeping windows that start in the input or its top/left
 * padding. count_include_pad (avg_pool2d only) is used as given: 1 (torch's
 * default) divides by the window clipped to the padded input, 0 by its
 * elements inside the input. Zero-initialise the struct and set what you
 * need. */
/* x [N, C, H, W] f32/f64. Ties take the first maximum (the gradient goes
 * there); NaN propagates. */
FG_API fg_output fg_max_pool2d(fg_graph *g, fg_output x, const fg_pool2d_opts *o);
/* note: count_include_pad is used as given; torch's default is 1 */
FG_API fg_output fg_avg_pool2d(fg_graph *g, fg_output x, const fg_pool2d_opts *o);
/* [N, C, 1, 1]: each plane's mean / maximum. */
FG_API fg_output fg_global_avg_pool(fg_graph *g, fg_output x);
FG_API fg_output fg_global_max_pool(fg_graph *g, fg_output x);
/* [N, C, out_h, out_w]: output i averages rows [floor(i H / out_h),
 * ceil((i + 1) H / out_h)), columns alike (torch's adaptive_avg_pool2d). */
FG_API fg_output fg_adaptive_avg_pool2d(fg_graph *g, fg_output x, int64_t out_h, int64_t out_w);
/* x (f32 or f64, rank >= 2) with its last two dims resized to o->sizes
 * (flowgraph/types.h, fg_resize_opts): nearest neighbour, or bilinear.
 * torch.nn.functional.interpolate(x, size, mode="nearest") is
 * fg_resize_nearest with ASYMMETRIC and FLOOR; mode="bilinear" is
 * fg_resize_linear with HALF_PIXEL (align_corners=False) or ALIGN_CORNERS. */
FG_API fg_output fg_resize_nearest(fg_graph *g, fg_output x, const fg_resize_opts *o);
FG_API fg_output fg_resize_linear(fg_graph *g, fg_output x, const fg_resize_opts *o);
/* ---- convolution (NCHW, as torch.nn.functional) -------------------------- */
/* Zero fields mean the defaults: strides 1, dilations 1, groups 1, pads 0
 * (top, left, bottom, right). same = 1: PyTorch's padding='same' (strides
 * must be 1; total pad dilation * (k - 1), the odd one at the bottom/right;
 * pads must then be 0). output_padding: conv_transpose2d only (< stride). */
typedef struct fg_conv2d_opts {
  int64_t strides[2];
  int64_t pads[4];
  int64_t dilations[2];
  int64_t groups;
  int same;
  int64_t output_padding[2];
} fg_conv2d_opts;
/* x [N, C, H, W], w [O, C/groups, kH, kW], bias [O] or .node = -1 (none);
 * opts NULL: the defaults. Output [N, O, OH, OW]. f32 and f64. */
FG_API fg_output fg_conv2d(fg_graph *g, fg_output x, fg_output w, fg_output bias,
                           const fg_conv2d_opts *opts);
/* torch.nn.functional.conv_transpose2d: x [N, C_in, H, W],
 * w [C_in, C_out/groups, kH, kW], bias [C_out] or none; output height
 * (H - 1) stride - pad_top - pad_bottom + dilation (kH - 1) +
 * output_padding + 1. `same` is refused. */
FG_API fg_output fg_conv_transpose2d(fg_graph *g, fg_output x, fg_output w, fg_output bias,
                                     const fg_conv2d_opts *opts);
/* torch.nn.functional.conv1d, built as conv2d with a height of 1 (x and w
 * get a size-1 axis 2, the output loses it): x [N, C, L],
 * w [O, C/groups, k], bias [O] or none; output [N, O, OL]. Zero fields
 * mean the defaults, as for conv2d; pads are (left, right). At most one
 * of the output's dims may be unknown when it is built (the batch). */
typedef struct fg_conv1d_opts {
  int64_t stride;
  int64_t pads[2];
  int64_t dilation;
  int64_t groups;
  int same;
} fg_conv1d_opts;
FG_API fg_output fg_conv1d(fg_graph *g, fg_output x, fg_output w, fg_output bias,
                           const fg_conv1d_opts *opts);

/* ---- state -------------------------------------------------------------- */
/* Writes `value` into `variable` (the output of fg_variable) when run; its
 * output is the new value. */
FG_API fg_output fg_assign(fg_graph *g, fg_output variable, fg_output value);

/* ---- normalization (torch.nn.functional semantics) ----------------------- */
/* x is [N, C, ...]; scale, shift, running_mean and running_var are [C] of
 * x's dtype; scale or shift .node = -1: none (ones or zeros of [C], so C
 * must be known). training is a bool scalar tensor (a constant, a
 * placeholder, or the graph-wide training flag), so one saved graph serves
 * both modes: true normalises with the batch's statistics (biased
 * variance), false with the running ones. Returns y. Outputs 1..3 of y's
 * node are the mean and 1 / sqrt(var + epsilon) that normalised x and the
 * batch's unbiased variance (fg_output_at), for the gradient and the
 * update; they carry no gradient.
 * running_mean and running_var must be variables: fg_batch_norm also makes
 * their update node (op batch_norm_update_stats, inputs running_mean,
 * running_var, then y's outputs 1 and 3, then training), which in training
 * mode writes running = (1 - momentum) running + momentum batch (unbiased
 * variance, as PyTorch) in place and otherwise does nothing. fg_minimize
 * runs every such node whose batch_norm the loss depends on as part of its
 * train target (TensorFlow's UPDATE_OPS); a graph run without fg_minimize
 * must fetch the node itself to update the statistics. momentum is in
 * [0, 1] (PyTorch's cumulative momentum=None is not offered); epsilon > 0.
 * The gradient flows to x, scale and shift. */
FG_API fg_output fg_batch_norm(fg_graph *g, fg_output x, fg_output scale, fg_output shift,
                               fg_output running_mean, fg_output running_var, fg_output training,
                               double momentum, double epsilon);
/* Normalises over x's last normalized_rank dims (torch's layer_norm with
 * normalized_shape = those dims); scale and shift have those dims. */
FG_API fg_output fg_layer_norm(fg_graph *g, fg_output x, fg_output scale, fg_output shift,
                               int normalized_rank,
                               double epsilon); /* scale/shift .node = -1: none */
/* Per sample over num_groups groups of C / num_groups channels (and the
 * spatial dims); scale and shift per channel, [C]. */
FG_API fg_output fg_group_norm(fg_graph *g, fg_output x, fg_output scale, fg_output shift,
                               int64_t num_groups, double epsilon);
/* Per sample and channel (group_norm with C groups; C must be known);
 * always the input's statistics (torch's use_input_stats=True, no
 * running statistics). scale and shift [C], optional. */
FG_API fg_output fg_instance_norm(fg_graph *g, fg_output x, fg_output scale, fg_output shift,
                                  double epsilon);

/* ---- graph inputs, outputs, metadata ------------------------------------ */
/* Marks `o` as a named graph output (what `flowgraph run` fetches by default). */
FG_API int fg_graph_add_output(fg_graph *g, fg_output o);
FG_API int fg_graph_num_outputs(const fg_graph *g);
FG_API fg_output fg_graph_output(const fg_graph *g, int i);
/* Free-form string metadata ("producer", "description", ...). Copies.
 * The values of "loss" and "train_target" are node names ("node" or
 * "node:index") that fg_set_name keeps up to date. */
FG_API int fg_graph_set_metadata(fg_graph *g, const char *key, const char *value);
FG_API int fg_graph_num_metadata(const fg_graph *g);
FG_API const char *fg_graph_metadata_key(const fg_graph *g, int i);
/* NULL when absent. */
FG_API const char *fg_graph_metadata(const fg_graph *g, const char *key);

/* ---- reading a graph ---------------------------------------------------- */
/* Node ids are 0..num_nodes-1, in insertion order, which is topological. */
FG_API int fg_graph_num_nodes(const fg_graph *g);
/* Node id by name, or -1. */
FG_API int fg_graph_find(const fg_graph *g, const char *name);
/* Parses "name" or "name:index" into an output; node = -1 when absent. */
FG_API fg_output fg_graph_find_output(const fg_graph *g, const char *name);
/* Why fg_graph_find_output finds no `name`, as a hint for a message:
 * "node 'probs' has one output (probs or probs:0)" for an index past a
 * node's outputs, "did you mean 'accuracy'?" for a name close to a node's
 * (fg_closest_name), else "". Writes at most size bytes (NUL included)
 * and returns buf. */
FG_API const char *fg_graph_output_hint(const fg_graph *g, const char *name, char *buf,
                                        size_t size);
/* The candidate closest to `name` by edit distance (optimal string
 * alignment: insertions, deletions, substitutions and swaps of adjacent
 * characters, ignoring case), when it is close enough to be a likely typo:
 * at most max(1, length / 3) edits for a name of 2 or more characters,
 * and fewer edits than the name has characters. Ties go to the earlier
 * candidate; an exact match is returned as is. NULL when none is close,
 * or for NULL arguments (NULL candidates are skipped). The pointer is one
 * of `candidates`. */
FG_API const char *fg_closest_name(const char *name, const char *const *candidates, int n);
/* Strings are owned by the graph; NULL for a bad id. */
FG_API const char *fg_node_name(const fg_graph *g, int node);
FG_API const char *fg_node_op(const fg_graph *g, int node);
/* The device set with fg_set_device, or "cpu:0" for an unplaced node. */
FG_API const char *fg_node_device(const fg_graph *g, int node);
/* The device set with fg_set_device, or NULL for an unplaced node (saving
 * keeps the difference: unplaced nodes are written without a device). */
FG_API const char *fg_node_device_explicit(const fg_graph *g, int node);
FG_API int fg_node_num_inputs(const fg_graph *g, int node);
FG_API fg_output fg_node_input(const fg_graph *g, int node, int i);
FG_API int fg_node_num_outputs(const fg_graph *g, int node);
FG_API fg_dtype fg_output_dtype(const fg_graph *g, fg_output o);
/* Writes up to FG_MAX_RANK dims (FG_DIM_UNKNOWN where unknown); returns the
 * rank, or -1 for a bad output. */
FG_API int fg_output_shape(const fg_graph *g, fg_output o, int64_t *dims);
/* Floating-point operations of one run of the node for its inferred shapes;
 * -1 when a dimension is unknown. */
FG_API int64_t fg_node_flops(const fg_graph *g, int node);
/* The FLOPs of every node (flops[fg_graph_num_nodes(g)], -1 where a
 * dimension stays unknown) with the shapes inferred again from the
 * placeholders, whose unknown dimensions ('?') are taken as `batch` (>= 1).
 * 0, or -1 with status set (a shape the batch makes invalid names the
 * node). */
FG_API int fg_graph_flops_at_batch(const fg_graph *g, int64_t batch, int64_t *flops,
                                   fg_status *status);
/* Attributes of a node. */
FG_API int fg_node_num_attrs(const fg_graph *g, int node);
FG_API const char *fg_node_attr_name(const fg_graph *g, int node, int i);
FG_API fg_attr_type fg_node_attr_type(const fg_graph *g, int node,
                                      const char *name); /* 0 if absent */
/* Getters return 0 on success, -1 when absent or of another type. Pointers
 * are owned by the graph. */
FG_API int fg_node_attr_int(const fg_graph *g, int node, const char *name, int64_t *v);
FG_API int fg_node_attr_float(const fg_graph *g, int node, const char *name, double *v);
FG_API int fg_node_attr_string(const fg_graph *g, int node, const char *name, const char **v);
FG_API int fg_node_attr_ints(const fg_graph *g, int node, const char *name, const int64_t **v,
                             int *n);
FG_API int fg_node_attr_floats(const fg_graph *g, int node, const char *name, const double **v,
                               int *n);
FG_API int fg_node_attr_tensor(const fg_graph *g, int node, const char *name, const fg_tensor **v);

/* The op table: what `flowgraph ops` prints. Strings are static (valid for
 * the life of the process); nothing here needs freeing. */
FG_API int fg_num_ops(void);
FG_API const char *fg_op_name(int i); /* NULL for a bad index */
/* The op's id by name, or -1. */
FG_API int fg_op_find(const char *name);

enum {
  FG_OP_INFO_ELEMENTWISE = 1u << 0,    /* out[i] depends on the inputs' element i */
  FG_OP_INFO_DIFFERENTIABLE = 1u << 1, /* autodiff passes a gradient through it */
  FG_OP_INFO_STATEFUL = 1u << 2,       /* reads or writes session state, or synchronises */
  FG_OP_INFO_SOURCE = 1u << 3          /* no inputs and no kernel: fed, stored or persistent */
};

typedef struct fg_op_info {
  const char *name;
  const char *inputs;         /* "var, grad, lr, ctrl..." */
  const char *doc;            /* one line */
  int min_inputs, max_inputs; /* max -1: any number */
  /* -1: set by each node's attributes (split) */
  int n_outputs;
  int n_attrs;    /* the op's own; attributes every op takes are listed apart */
  unsigned flags; /* FG_OP_INFO_* */
} fg_op_info;

typedef struct fg_op_attr_info {
  const char *name;
  fg_attr_type type; /* a float attribute also accepts an int */
  const char *dflt;  /* the default as text; NULL when required */
  const char *doc;
} fg_op_attr_info;

/* 0 and *info filled, or -1 for a bad op index. */
FG_API int fg_op_info_get(int op, fg_op_info *info);
/* Attribute k (0 <= k < n_attrs) of op `op`; 0, or -1 when out of range.
 * op = -1 lists the attributes every op accepts (k < fg_op_common_attrs()). */
FG_API int fg_op_attr_info_get(int op, int k, fg_op_attr_info *info);
FG_API int fg_op_common_attrs(void);
/* The dtypes that have a kernel for `op` on `device` ("cpu" or "cuda"), as
 * bits (1u << dtype). 0 when none, or when the build has no such backend. */
FG_API unsigned fg_op_kernel_dtypes(int op, const char *device);
/* "int", "float", "string", "ints", "floats", "tensor"; "unknown" else. */
FG_API const char *fg_attr_type_name(fg_attr_type type);

#ifdef __cplusplus
}
#endif
#endif
