/*===- muon/runtime.h - The runtime's C API -----------------------*- C -*-===*
 *
 * Distributed Muon for trainers in any language: opaque handles, status
 * codes, and a message for the last error of the calling thread. It wraps
 * the C++ Optimizer (muon/Runtime/Optimizer.h) on the CPU backend.
 *
 *   muon_optimizer *opt;
 *   if (muon_optimizer_create_mpi("plan.json", MPI_Comm_c2f(MPI_COMM_WORLD),
 *                                 120.0, &opt) != MUON_OK)
 *     fprintf(stderr, "%s\n", muon_last_error());
 *   muon_optimizer_bind(opt, "wq", values, grad, MUON_F32, elements);
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

/* The C API's version, as a string ("0.4.0": statuses are the canonical
 * codes since 0.4.0; MUON_INVALID and MUON_FAILED are gone). */
#define MUON_RUNTIME_VERSION_STRING "0.4.0"
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

/* An optimizer from a plan file (muon-plan/1 or muon-plan-bin/2) over the
 * MPI communicator given as its Fortran handle (MPI_Comm_c2f(comm); MPI
 * must be initialized), or in this process alone with -1. `options` may be
 * NULL (the defaults). Collective over the communicator. */
muon_status muon_optimizer_create(const char *plan_path,
                                  int64_t mpi_comm_fortran,
                                  const muon_options *options,
                                  muon_optimizer **out);

/* An optimizer from a plan file (muon-plan/1) over an MPI communicator
 * given as its Fortran handle (MPI_Comm_c2f(comm)), so that this header
 * needs no mpi.h; MPI must be initialized. Waits on peers at most
 * `timeout_seconds`. Collective over the communicator. */
muon_status muon_optimizer_create_mpi(const char *plan_path,
                                      int64_t mpi_comm_fortran,
                                      double timeout_seconds,
                                      muon_optimizer **out);
/* An optimizer for a one-rank plan, in this process alone. */
muon_status muon_optimizer_create_single(const char *plan_path,
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
  /* 1 where its group's algorithm orthogonalizes its matrices (Muon), 0 for
   * an element-wise one (AdamW, ...: muon_optimizer_group_algorithm names
   * it). */
  int is_muon;
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

/* A parameter group and its current hyper-parameters (torch.optim's
 * param_groups): each field holds the group's setting of that name where
 * its algorithm has one, else 0. Muon groups have lr, weight_decay,
 * momentum and nesterov; AdamW groups lr, weight_decay, beta1, beta2 and
 * eps; other algorithms theirs (muon_optimizer_group_algorithm; every
 * setting by name: muon_optimizer_group_setting). */
typedef struct muon_group_info {
  const char *name; /* valid while the optimizer lives */
  int is_muon; /* 1 for an algorithm that orthogonalizes (Muon) */
  double lr, weight_decay, momentum;
  int nesterov;
  double beta1, beta2, eps;
} muon_group_info;
int64_t muon_optimizer_group_count(const muon_optimizer *opt);
muon_status muon_optimizer_group(const muon_optimizer *opt, int64_t index,
                                 muon_group_info *out);
/* The name of group `index`'s algorithm: "muon", "adamw", "lion", ... (the
 * spec's param_groups[i].algorithm); static storage. */
muon_status muon_optimizer_group_algorithm(const muon_optimizer *opt,
                                           int64_t index, const char **name);
/* Sets group `name`'s hyper-parameters for the following steps (the fields
 * its algorithm has; `name` in `options` is ignored). Every rank must set
 * the same values before the next step, which refuses to run otherwise. A
 * bad value is refused with nothing changed. */
muon_status muon_optimizer_set_group(muon_optimizer *opt, const char *name,
                                     const muon_group_info *options);
/* A group's settings by name, for every setting of its algorithm (the
 * settings table, muon/Plan/GroupSettings.h; muon_group_info has only the
 * first ones). As numbers (booleans 0 or 1): "lr", "weight_decay" (every
 * algorithm); "momentum", "nesterov", "normuon", "normuon_beta2",
 * "extra_scale_factor" (Muon); "beta1", "beta2", "eps" (AdamW). As text:
 * "adjust_lr", "weight_decay_mode" (Muon). A setting the group's
 * algorithm does not have, or one of the other kind, is refused and the
 * message lists the group's settings. Setting one is muon_optimizer_set_group
 * for that field: checked, nothing changed on a refusal, every rank must set
 * the same before the next step; "normuon" is fixed by the plan. A text
 * value stays valid until the setting changes or the optimizer is
 * destroyed. */
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
/* Only the learning rate (a schedule's usual change). */
muon_status muon_optimizer_set_group_lr(muon_optimizer *opt, const char *name,
                                        double lr);
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
