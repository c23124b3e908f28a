/*===- muon/runtime.h - The runtime's C API -----------------------*- C -*-===*
 *
 * Distributed Muon for trainers in any language: opaque handles, status
 * codes, and a message for the last error of the calling thread. It wraps
 * the C++ Optimizer (muon/Runtime/Optimizer.h) on the registered backends.
 * One call creates an optimizer (its options say where it runs) and one
 * pair of calls reads and sets any group setting by name.
 *
 *   muon_options options;
 *   muon_options_init(&options);
 *   options.mpi_comm = MPI_Comm_c2f(MPI_COMM_WORLD);
 *   muon_optimizer *opt;
 *   if (muon_optimizer_create("plan.json", &options, &opt) != MUON_OK)
 *     fprintf(stderr, "%s\n", muon_last_error());
 *   muon_optimizer_bind(opt, "wq", values, grad, MUON_F32, elements);
 *   muon_optimizer_set_group_setting(opt, "muon", "lr", 0.02);
 *   int applied;
 *   muon_optimizer_step(opt, &applied);
 *
 * Calls that talk to other ranks (create, step, checkpoints) are
 * collective. A failing call changes nothing unless it says otherwise.
 *
 *===----------------------------------------------------------------------===*/
#ifndef MUON_RUNTIME_C_H
#define MUON_RUNTIME_C_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct muon_optimizer muon_optimizer;

/* The C API's version, as a string. 0.5.0: one create call
 * (muon_optimizer_create with the communicator in its options) and group
 * settings by name only (muon_group_info names the group's algorithm).
 * 0.4.0: statuses are the canonical codes. */
#define MUON_RUNTIME_VERSION_STRING "0.5.0"
const char *muon_runtime_version(void);

/* Each call's status is the runtime's own status code (never read from the
 * message text): the canonical codes of absl::Status, gRPC and IREE, with
 * their numbers. muon_last_error() has the message. */
typedef enum muon_status {
  MUON_OK = 0,
  /* The caller stopped the work. */
  MUON_CANCELLED = 1,
  /* Bad input: a plan, an argument, a binding, a checkpoint that does not
   * fit. Nothing changed. */
  MUON_INVALID_ARGUMENT = 3,
  /* A peer did not answer within the timeout (timeout_seconds): it died or
   * stalled. */
  MUON_DEADLINE_EXCEEDED = 4,
  /* A file, parameter or group that is not there. */
  MUON_NOT_FOUND = 5,
  /* The device has no room. */
  MUON_RESOURCE_EXHAUSTED = 8,
  /* A call before its preconditions (a step with unbound storage, ranks
   * with different group settings). Nothing changed. */
  MUON_FAILED_PRECONDITION = 9,
  /* Something this build or backend does not do. */
  MUON_UNIMPLEMENTED = 12,
  /* The device reported an error (e.g. a CUDA error). */
  MUON_INTERNAL = 13,
  /* A transport failed, a file could not be written. */
  MUON_UNAVAILABLE = 14,
  /* Data that fails its checks (a damaged checkpoint or plan file). */
  MUON_DATA_LOSS = 15
} muon_status;

/* "ok", "invalid argument", "deadline exceeded", ...: a code's name. */
const char *muon_status_name(muon_status status);

typedef enum muon_dtype { MUON_F32 = 0, MUON_BF16 = 1, MUON_F16 = 2 } muon_dtype;

/* The message of the calling thread's last failed call ("" if none). */
const char *muon_last_error(void);

/* Where an optimizer runs. Initialize with muon_options_init, then change
 * what differs. */
typedef struct muon_options {
  /* The MPI communicator to run over, as its Fortran handle
   * (MPI_Comm_c2f(comm)), so that this header needs no mpi.h; MPI must be
   * initialized. -1 (the default): this process alone. */
  int64_t mpi_comm;
  /* "cpu" (default), or "cuda" / "cuda:N" where the library has the CUDA
   * backend registered. */
  const char *device;
  /* How exchanges move: "mpi" (default; host memory), "host" (staged
   * through host memory, for device memory MPI cannot read) or "nccl". */
  const char *transport;
  /* Longest wait for a peer in any collective (default 120 s). */
  double timeout_seconds;
} muon_options;
void muon_options_init(muon_options *options);

/* An optimizer from a plan file (muon-plan/1 or muon-plan-bin/2), where
 * `options` says (NULL: the defaults, this process alone on the CPU).
 * Collective over the options' communicator. */
muon_status muon_optimizer_create(const char *plan_path,
                                  const muon_options *options,
                                  muon_optimizer **out);
void muon_optimizer_destroy(muon_optimizer *opt);

int64_t muon_optimizer_rank(const muon_optimizer *opt);
int64_t muon_optimizer_world_size(const muon_optimizer *opt);
int64_t muon_optimizer_param_count(const muon_optimizer *opt);
int64_t muon_optimizer_steps(const muon_optimizer *opt);

/* One parameter as this rank sees it. Pointers stay valid while the
 * optimizer lives. */
typedef struct muon_param_info {
  const char *name;
  muon_dtype dtype;
  int64_t dims;
  const int64_t *shape; /* [dims]: the whole tensor */
  /* [dims]: this rank's piece, [box_begin, box_end) per dim, row-major;
   * `elements` is 0 when the rank holds nothing of it. */
  const int64_t *box_begin, *box_end;
  int64_t elements;
  /* Which partial summand of the gradient this rank holds (0 if none). */
  int64_t summand;
  /* Index of the parameter's group (muon_optimizer_group). */
  int64_t group;
} muon_param_info;
muon_status muon_optimizer_param(const muon_optimizer *opt, int64_t index,
                                 muon_param_info *out);

/* Binds this rank's storage of parameter `name` (`elements` values of
 * `dtype`, row-major over its box). A NULL `grad` says the parameter has no
 * gradient (torch's grad None): steps leave it untouched while every rank
 * that holds it has none (muon::runtime::Optimizer::bind). */
muon_status muon_optimizer_bind(muon_optimizer *opt, const char *name,
                                void *values, const void *grad,
                                muon_dtype dtype, int64_t elements);
/* The same with a gradient of its own type (bf16 weights with f32
 * gradients, f32 master weights with bf16 ones); values are of the plan's
 * dtype. */
muon_status muon_optimizer_bind_typed(muon_optimizer *opt, const char *name,
                                      void *values, muon_dtype value_dtype,
                                      const void *grad, muon_dtype grad_dtype,
                                      int64_t elements);

/* A parameter group (torch.optim's param_groups): its name and its
 * algorithm's. Its hyper-parameters are read and set by name below. */
typedef struct muon_group_info {
  const char *name; /* valid while the optimizer lives */
  /* "muon", "adamw", "lion", ... (the spec's param_groups[i].algorithm);
   * static storage. */
  const char *algorithm;
  /* 1 where the algorithm orthogonalizes its matrices (Muon), 0 for an
   * element-wise one. */
  int orthogonalizes;
} muon_group_info;
int64_t muon_optimizer_group_count(const muon_optimizer *opt);
muon_status muon_optimizer_group(const muon_optimizer *opt, int64_t index,
                                 muon_group_info *out);
/* A group's settings by name, every setting of its algorithm (the settings
 * table, muon/Plan/GroupSettings.h). As numbers (booleans 0 or 1): "lr",
 * "weight_decay" (every algorithm); "momentum", "nesterov", "normuon",
 * "normuon_beta2", "extra_scale_factor" (Muon); "beta1", "beta2" (AdamW,
 * Lion); "eps" (AdamW). As text, through the _text pair: "adjust_lr",
 * "weight_decay_mode" (Muon). A setting the group's algorithm does not
 * have, or one of the other kind, is refused and the message lists the
 * group's settings. Setting one is checked and takes effect at the next
 * step; a refusal changes nothing; every rank must set the same values
 * before the next step, which refuses to run otherwise; "normuon" is fixed
 * by the plan. A text value stays valid until the setting changes or the
 * optimizer is destroyed. */
muon_status muon_optimizer_group_setting(const muon_optimizer *opt,
                                         const char *group, const char *name,
                                         double *value);
muon_status muon_optimizer_set_group_setting(muon_optimizer *opt,
                                             const char *group,
                                             const char *name, double value);
muon_status muon_optimizer_group_setting_text(const muon_optimizer *opt,
                                              const char *group,
                                              const char *name,
                                              const char **value);
muon_status muon_optimizer_set_group_setting_text(muon_optimizer *opt,
                                                  const char *group,
                                                  const char *name,
                                                  const char *value);
/* QK-clip (MuonClip, Kimi K2; the plan's qk_clip layers): a layer's
 * declaration. */
typedef struct muon_qk_clip_info {
  const char *name; /* valid while the optimizer lives */
  const char *query, *key; /* the W_q and W_k parameters' names */
  int64_t num_heads, num_kv_heads;
  double threshold;
} muon_qk_clip_info;
int64_t muon_optimizer_qk_clip_count(const muon_optimizer *opt);
muon_status muon_optimizer_qk_clip(const muon_optimizer *opt, int64_t index,
                                   muon_qk_clip_info *out);
/* The step input of layer `layer`: the largest attention logit of each of
 * its `count` (num_heads) query heads in this step's forward pass. After
 * the next step's update, heads above the threshold have their rows of W_q
 * and W_k scaled by sqrt(threshold / logit). For the next step only; the
 * step takes the largest value per head over the ranks (a layer no rank
 * set is not clipped). An unknown layer, a wrong count or a non-finite
 * value is refused with nothing changed. Not collective. */
muon_status muon_optimizer_set_qk_max_logits(muon_optimizer *opt,
                                             const char *layer,
                                             const float *logits,
                                             int64_t count);
/* For a trainer that reduces each matrix's gradient to the rank that
 * orthogonalizes it, leaving zero on the other ranks: with `on` non-zero,
 * the steps that follow skip the momentum and the NaN check of the
 * parameters whose matrices all have another owner (their momentum is
 * zero here; the owner's is the whole). Not collective; off by default. */
muon_status muon_optimizer_set_gradients_reduced_to_owners(muon_optimizer *opt,
                                                           int on);
/* One step; `*applied` is 0 when a NaN/Inf gradient on some rank skipped
 * it (nothing changed). Collective. */
muon_status muon_optimizer_step(muon_optimizer *opt, int *applied);
/* Checkpoints by parameter name and global box (see the C++ API).
 * Collective. */
muon_status muon_optimizer_save_checkpoint(muon_optimizer *opt,
                                           const char *dir,
                                           int with_parameters);
muon_status muon_optimizer_load_checkpoint(muon_optimizer *opt,
                                           const char *dir,
                                           int with_parameters);
/* The matrices `rank` orthogonalizes ("w", or "w[3]" for one matrix of a
 * batched parameter), one per line; valid until the next call on `opt`. */
const char *muon_optimizer_assignments(muon_optimizer *opt, int64_t rank);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MUON_RUNTIME_C_H */
