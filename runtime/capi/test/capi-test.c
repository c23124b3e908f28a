/*===- capi-test.c - The C API, driven from C -----------------------------===*
 *
 * capi-test PLAN [--mpi [--split N]] CHECKPOINT_DIR: binds every piece this
 * rank holds (with --split, the world is cut into communicators of N ranks
 * that each run the plan on their own),
 * checks that bad calls fail with a status and a message and change
 * nothing (and leave nothing behind for the calls after them), sets the
 * groups' learning rates before every step as a schedule does, runs three
 * steps, and round-trips a checkpoint. Prints one line
 * per rank; exits 1 on anything unexpected.
 *
 *===----------------------------------------------------------------------===*/
#include "muon/runtime.h"

#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures = 0;

/* The global row-major index of element `local` of a piece: replicas of a
 * piece must hold the same values, so values depend on this, not on rank. */
static int64_t globalIndex(const muon_param_info *p, int64_t local) {
  int64_t global = 0, stride = 1;
  for (int64_t d = p->dims; d-- > 0;) {
    int64_t width = p->box_end[d] - p->box_begin[d];
    int64_t at = p->box_begin[d] + local % width;
    local /= width;
    global += at * stride;
    stride *= p->shape[d];
  }
  return global;
}

static float initialValue(const muon_param_info *p, int64_t local) {
  return (float)(globalIndex(p, local) % 7 - 3) / 8.0f;
}

#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "capi-test: %s:%d: %s (last error: %s)\n", __FILE__,   \
              __LINE__, #cond, muon_last_error());                             \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: capi-test PLAN [--mpi] CHECKPOINT_DIR\n");
    return 2;
  }
  int mpi = argc > 3 && strcmp(argv[2], "--mpi") == 0;
  int split = argc > 5 && strcmp(argv[3], "--split") == 0 ? atoi(argv[4]) : 0;
  char checkpoint[512];
  snprintf(checkpoint, sizeof(checkpoint), "%s", argv[argc - 1]);
  muon_optimizer *opt = NULL;
  MPI_Comm comm = MPI_COMM_NULL;
  if (mpi) {
    MPI_Init(&argc, &argv);
    comm = MPI_COMM_WORLD;
    if (split > 0) {
      /* Communicators of `split` ranks: any communicator, not the world. */
      int world;
      MPI_Comm_rank(MPI_COMM_WORLD, &world);
      MPI_Comm_split(MPI_COMM_WORLD, world / split, world, &comm);
      snprintf(checkpoint, sizeof(checkpoint), "%s-%d", argv[argc - 1],
               world / split);
    }
    muon_options world;
    muon_options_init(&world);
    world.mpi_comm = MPI_Comm_c2f(comm);
    world.timeout_seconds = 60.0;
    EXPECT(muon_optimizer_create(argv[1], &world, &opt) == MUON_OK);
  } else {
    EXPECT(muon_optimizer_create(argv[1], NULL, &opt) == MUON_OK);
    /* A communicator while MPI is not initialized: refused by its code. */
    muon_options early;
    muon_options_init(&early);
    early.mpi_comm = 0;
    muon_optimizer *none = NULL;
    EXPECT(muon_optimizer_create(argv[1], &early, &none) ==
               MUON_FAILED_PRECONDITION &&
           none == NULL);
    EXPECT(strstr(muon_last_error(), "MPI is not initialized") != NULL);
  }
  if (!opt)
    return 1;
  /* A plan file that is not there: a status and a message. */
  muon_optimizer *missing = NULL;
  EXPECT(muon_optimizer_create("/nonexistent/plan.json", NULL, &missing) ==
         MUON_NOT_FOUND);
  EXPECT(missing == NULL);
  EXPECT(strstr(muon_last_error(), "cannot read the plan file") != NULL);
  /* Options: a device no registered backend has is refused, by name. */
  muon_options options;
  muon_options_init(&options);
  EXPECT(strcmp(options.device, "cpu") == 0 && options.timeout_seconds > 0 &&
         options.mpi_comm == -1);
  options.device = "tpu";
  EXPECT(muon_optimizer_create(argv[1], &options, &missing) ==
         MUON_NOT_FOUND);
  EXPECT(strstr(muon_last_error(), "unknown device 'tpu'") != NULL);
  muon_options_init(&options);
  options.transport = "carrier-pigeon";
  EXPECT(muon_optimizer_create(argv[1], &options, &missing) ==
         MUON_NOT_FOUND);
  EXPECT(strstr(muon_last_error(), "unknown transport 'carrier-pigeon'") !=
         NULL);
  EXPECT(missing == NULL);

  /* Every status is the runtime's own code, with its canonical number. */
  EXPECT(MUON_INVALID_ARGUMENT == 3 && MUON_DEADLINE_EXCEEDED == 4 &&
         MUON_UNAVAILABLE == 14);
  EXPECT(strcmp(muon_status_name(MUON_DEADLINE_EXCEEDED),
                "deadline exceeded") == 0);
  EXPECT(strcmp(muon_status_name(MUON_NOT_FOUND), "not found") == 0);
  EXPECT(strlen(muon_runtime_version()) > 0);
  EXPECT(strcmp(muon_runtime_version(), MUON_RUNTIME_VERSION_STRING) == 0);
  int64_t rank = muon_optimizer_rank(opt);
  int64_t count = muon_optimizer_param_count(opt);
  float **values = calloc((size_t)count, sizeof(float *));
  float **grads = calloc((size_t)count, sizeof(float *));
  float **saved = calloc((size_t)count, sizeof(float *));
  muon_param_info info;
  EXPECT(muon_optimizer_param(opt, count, &info) == MUON_INVALID_ARGUMENT);

  /* A step before binding fails on every rank and changes nothing. */
  int applied = -1;
  EXPECT(muon_optimizer_step(opt, &applied) == MUON_FAILED_PRECONDITION);
  EXPECT(strstr(muon_last_error(), "has not bound") != NULL);
  EXPECT(muon_optimizer_steps(opt) == 0);

  for (int64_t i = 0; i < count; ++i) {
    EXPECT(muon_optimizer_param(opt, i, &info) == MUON_OK);
    EXPECT(info.dtype == MUON_F32);
    EXPECT(info.summand >= 0);
    EXPECT(info.group >= 0 && info.group < muon_optimizer_group_count(opt));
    int64_t n = info.elements;
    values[i] = malloc((size_t)(n ? n : 1) * sizeof(float));
    grads[i] = malloc((size_t)(n ? n : 1) * sizeof(float));
    saved[i] = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t e = 0; e < n; ++e) {
      values[i][e] = initialValue(&info, e);
      grads[i][e] = (float)((globalIndex(&info, e) * 3 + i) % 5 - 2) / 16.0f;
    }
    /* Wrong sizes and types are refused. */
    EXPECT(muon_optimizer_bind(opt, info.name, values[i], grads[i], MUON_F32,
                               n + 1) == MUON_INVALID_ARGUMENT);
    EXPECT(strstr(muon_last_error(), "elements of it") != NULL);
    EXPECT(muon_optimizer_bind(opt, info.name, values[i], grads[i], MUON_BF16,
                               n) == MUON_INVALID_ARGUMENT);
    EXPECT(muon_optimizer_bind_typed(opt, info.name, values[i], MUON_F32,
                                     grads[i], (muon_dtype)7,
                                     n) == MUON_INVALID_ARGUMENT);
    EXPECT(muon_optimizer_bind(opt, info.name, values[i], grads[i], MUON_F32,
                               n) == MUON_OK);
  }
  EXPECT(muon_optimizer_bind(opt, "no.such.param", NULL, NULL, MUON_F32, 0) ==
         MUON_NOT_FOUND);
  EXPECT(strstr(muon_last_error(), "no parameter named") != NULL);

  /* The groups: the plan's two, and settings checked before they count. */
  int64_t groups = muon_optimizer_group_count(opt);
  EXPECT(groups == 2);
  double base[2] = {0, 0};
  for (int64_t g = 0; g < groups && g < 2; ++g) {
    muon_group_info group;
    EXPECT(muon_optimizer_group(opt, g, &group) == MUON_OK);
    EXPECT(muon_optimizer_group_setting(opt, group.name, "lr", &base[g]) ==
           MUON_OK);
  }
  /* The groups' algorithms by name (the registry's), and a group index out
   * of range refused. */
  muon_group_info group;
  EXPECT(muon_optimizer_group(opt, 0, &group) == MUON_OK);
  EXPECT(strcmp(group.name, "muon") == 0 &&
         strcmp(group.algorithm, "muon") == 0 && group.orthogonalizes == 1);
  EXPECT(muon_optimizer_group(opt, 1, &group) == MUON_OK &&
         strcmp(group.algorithm, "adamw") == 0 && group.orthogonalizes == 0);
  EXPECT(muon_optimizer_group(opt, 99, &group) == MUON_INVALID_ARGUMENT);
  EXPECT(strstr(muon_last_error(), "group index 99 is out of range") != NULL);
  double lr = -1;
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "lr", -1.0) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(strstr(muon_last_error(), "expected a finite number >= 0") != NULL);
  EXPECT(muon_optimizer_set_group_setting(opt, "head", "lr", 0.1) ==
         MUON_NOT_FOUND);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "lr", &lr) == MUON_OK &&
         lr == base[0]);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "momentum", 0.9) ==
         MUON_OK);

  /* Settings by name: every setting of each algorithm, checked before
   * they count, refusals changing nothing. */
  double number = -1;
  const char *text = NULL;
  EXPECT(muon_optimizer_group_setting(opt, "muon", "momentum", &number) ==
             MUON_OK &&
         number == 0.9);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "normuon_beta2",
                                          0.9) == MUON_OK);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "normuon_beta2",
                                      &number) == MUON_OK &&
         number == 0.9);
  /* Setting one leaves the others as they are. */
  EXPECT(muon_optimizer_group_setting(opt, "muon", "extra_scale_factor",
                                      &number) == MUON_OK &&
         number == 1.0);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "extra_scale_factor",
                                          0.5) == MUON_OK);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "lr", base[0]) ==
         MUON_OK);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "momentum", &number) ==
             MUON_OK &&
         number == 0.9);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "extra_scale_factor",
                                      &number) == MUON_OK &&
         number == 0.5);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "extra_scale_factor",
                                          -1.0) == MUON_INVALID_ARGUMENT);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "extra_scale_factor",
                                          1.0) == MUON_OK);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "nesterov", &number) ==
             MUON_OK &&
         number == 1.0);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "nesterov", 0.5) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(strstr(muon_last_error(), "is a boolean") != NULL);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "normuon", 1.0) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "normuon", &number) ==
             MUON_OK &&
         number == 0.0);
  EXPECT(muon_optimizer_set_group_setting(opt, "muon", "momentum", -0.5) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "momentum", &number) ==
             MUON_OK &&
         number == 0.9);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "beta1", &number) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(strstr(muon_last_error(), "has no number setting 'beta1'") != NULL);
  EXPECT(strstr(muon_last_error(), "adjust_lr (text)") != NULL);
  EXPECT(muon_optimizer_group_setting(opt, "muon", "adjust_lr", &number) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(muon_optimizer_group_setting(opt, "nope", "lr", &number) ==
         MUON_NOT_FOUND);
  EXPECT(strstr(muon_last_error(), "no group named 'nope'") != NULL);
  EXPECT(muon_optimizer_group_setting_text(opt, "muon", "adjust_lr",
                                           &text) == MUON_OK &&
         strcmp(text, "original") == 0);
  EXPECT(muon_optimizer_set_group_setting_text(
             opt, "muon", "adjust_lr", "sideways") == MUON_INVALID_ARGUMENT);
  EXPECT(muon_optimizer_set_group_setting_text(
             opt, "muon", "weight_decay_mode", "cautious") == MUON_OK);
  EXPECT(muon_optimizer_group_setting_text(opt, "muon", "weight_decay_mode",
                                           &text) == MUON_OK &&
         strcmp(text, "cautious") == 0);
  EXPECT(muon_optimizer_set_group_setting_text(
             opt, "muon", "weight_decay_mode", "decoupled") == MUON_OK);
  {
    muon_group_info other;
    EXPECT(muon_optimizer_group(opt, 1, &other) == MUON_OK);
    EXPECT(muon_optimizer_set_group_setting(opt, other.name, "beta2",
                                            0.99) == MUON_OK);
    EXPECT(muon_optimizer_group_setting(opt, other.name, "beta2", &number) ==
               MUON_OK &&
           number == 0.99);
    EXPECT(muon_optimizer_group_setting(opt, other.name, "momentum", &number) ==
           MUON_INVALID_ARGUMENT);
  }

  /* The owner-reduction promise: set and unset on a live optimizer, refused
   * without one (one rank here: every matrix is its own, nothing skipped). */
  EXPECT(muon_optimizer_set_gradients_reduced_to_owners(NULL, 1) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(muon_optimizer_set_gradients_reduced_to_owners(opt, 1) == MUON_OK);
  EXPECT(muon_optimizer_set_gradients_reduced_to_owners(opt, 0) == MUON_OK);

  /* QK-clip: logits only for the plan's layers, one finite value per
   * head; with layers, every head above the threshold each step. */
  float logits[64];
  EXPECT(muon_optimizer_set_qk_max_logits(opt, "no.such.layer", logits, 1) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(strstr(muon_last_error(), "no layer named 'no.such.layer'") != NULL);
  int64_t layers = muon_optimizer_qk_clip_count(opt);
  muon_qk_clip_info clip;
  EXPECT(muon_optimizer_qk_clip(opt, layers, &clip) == MUON_INVALID_ARGUMENT);
  for (int64_t l = 0; l < layers; ++l) {
    EXPECT(muon_optimizer_qk_clip(opt, l, &clip) == MUON_OK);
    EXPECT(clip.num_heads <= 64);
    logits[0] = NAN;
    EXPECT(muon_optimizer_set_qk_max_logits(opt, clip.name, logits,
                                            clip.num_heads) ==
           MUON_INVALID_ARGUMENT);
    EXPECT(strstr(muon_last_error(), "is not finite") != NULL);
    EXPECT(muon_optimizer_set_qk_max_logits(opt, clip.name, logits,
                                            clip.num_heads + 1) ==
           MUON_INVALID_ARGUMENT);
    EXPECT(strstr(muon_last_error(), "logits were given") != NULL);
  }
  for (int s = 0; s < 3; ++s) {
    for (int64_t l = 0; l < layers; ++l) {
      EXPECT(muon_optimizer_qk_clip(opt, l, &clip) == MUON_OK);
      for (int64_t h = 0; h < clip.num_heads && h < 64; ++h)
        logits[h] = (float)(2 * clip.threshold);
      EXPECT(muon_optimizer_set_qk_max_logits(opt, clip.name, logits,
                                              clip.num_heads) == MUON_OK);
    }
    /* A schedule: every rank sets the same rates before the step. */
    for (int64_t g = 0; g < groups && g < 2; ++g) {
      muon_group_info info_g;
      EXPECT(muon_optimizer_group(opt, g, &info_g) == MUON_OK);
      EXPECT(muon_optimizer_set_group_setting(opt, info_g.name, "lr",
                                              base[g] * (s + 1) / 3.0) ==
             MUON_OK);
    }
    EXPECT(muon_optimizer_step(opt, &applied) == MUON_OK);
    EXPECT(applied == 1);
  }
  EXPECT(muon_optimizer_steps(opt) == 3);
  int changed = 0;
  for (int64_t i = 0; i < count; ++i) {
    muon_optimizer_param(opt, i, &info);
    for (int64_t e = 0; e < info.elements; ++e) {
      changed |= values[i][e] != initialValue(&info, e);
      if (!isfinite(values[i][e]))
        ++failures;
    }
  }
  EXPECT(changed || count == 0);

  /* A checkpoint round trip restores the values exactly. */
  EXPECT(muon_optimizer_save_checkpoint(opt, checkpoint, 1) == MUON_OK);
  for (int64_t i = 0; i < count; ++i) {
    muon_optimizer_param(opt, i, &info);
    memcpy(saved[i], values[i], (size_t)info.elements * sizeof(float));
    for (int64_t e = 0; e < info.elements; ++e)
      values[i][e] = 42.0f;
  }
  EXPECT(muon_optimizer_load_checkpoint(opt, checkpoint, 1) == MUON_OK);
  for (int64_t i = 0; i < count; ++i) {
    muon_optimizer_param(opt, i, &info);
    EXPECT(memcmp(saved[i], values[i], (size_t)info.elements * sizeof(float)) ==
           0);
  }
  EXPECT(muon_optimizer_load_checkpoint(opt, "/nonexistent", 1) ==
         MUON_INVALID_ARGUMENT);
  /* An empty path would have written into the root directory. */
  EXPECT(muon_optimizer_save_checkpoint(opt, "", 1) == MUON_INVALID_ARGUMENT);
  EXPECT(strstr(muon_last_error(), "path is empty") != NULL);

  /* The first matrix this rank orthogonalizes, if any. */
  char owned[256];
  snprintf(owned, sizeof(owned), "%s", muon_optimizer_assignments(opt, rank));
  owned[strcspn(owned, "\n")] = 0;
  printf("capi rank %lld of %lld: %lld params, %lld steps, owns [%s]%s\n",
         (long long)rank, (long long)muon_optimizer_world_size(opt),
         (long long)count, (long long)muon_optimizer_steps(opt), owned,
         failures ? ", FAILED" : ", ok");
  fflush(stdout);
  for (int64_t i = 0; i < count; ++i) {
    free(values[i]);
    free(grads[i]);
    free(saved[i]);
  }
  free(values);
  free(grads);
  free(saved);
  muon_optimizer_destroy(opt);
  if (mpi) {
    if (split > 0)
      MPI_Comm_free(&comm);
    MPI_Finalize();
  }
  return failures ? 1 : 0;
}
