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

typedef enum muon_status {
  MUON_OK = 0,
  /* Bad input: a plan, an argument, a binding. Nothing changed. */
  MUON_INVALID = 2,
  /* The run failed: a peer did not answer in time, the device ran out of
   * memory, a file could not be written. */
  MUON_FAILED = 3
} muon_status;

typedef enum muon_dtype { MUON_F32 = 0, MUON_BF16 = 1, MUON_F16 = 2 } muon_dtype;

/* The message of the calling thread's last failed call ("" if none). */
const char *muon_last_error(void);

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
  int is_muon; /* else AdamW */
  int64_t dims;
  const int64_t *shape; /* [dims]: the whole tensor */
  /* [dims]: this rank's piece, [box_begin, box_end) per dim, row-major;
   * `elements` is 0 when the rank holds nothing of it. */
  const int64_t *box_begin, *box_end;
  int64_t elements;
} muon_param_info;
muon_status muon_optimizer_param(const muon_optimizer *opt, int64_t index,
                                 muon_param_info *out);

/* Binds this rank's storage of parameter `name` (`elements` values of
 * `dtype`, row-major over its box). */
muon_status muon_optimizer_bind(muon_optimizer *opt, const char *name,
                                void *values, const void *grad,
                                muon_dtype dtype, int64_t elements);
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
