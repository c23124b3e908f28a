/*===- capi-lion-test.c - Lion through the C API, against the paper -------===*
 *
 * capi-lion-test PLAN CHECKPOINT_DIR: PLAN is a one-process plan with the
 * groups "muon" (parameter "w") and "embed" (algorithm "lion", parameter
 * "emb"). Checks that the Lion group is named and set by its
 * settings like any other (the registry's names, refusals by status code),
 * runs three steps and compares "emb" bit for bit with Lion written here
 * from the paper (Chen et al. 2023, arXiv 2302.06675, Algorithm 2, with
 * decoupled weight decay), then round-trips a checkpoint. Prints one line;
 * exits 1 on anything unexpected.
 *
 *===----------------------------------------------------------------------===*/
#include "muon/runtime.h"

#include <stdio.h>
#include <string.h>

static int failures = 0;

#define EXPECT(cond)                                                           \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "capi-lion-test: %s:%d: %s (last error: %s)\n",         \
              __FILE__, __LINE__, #cond, muon_last_error());                   \
      ++failures;                                                              \
    }                                                                          \
  } while (0)

enum { kRows = 16, kCols = 8, kEmb = kRows * kCols, kW = 12 * 8 };

static float sign(float x) { return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x); }

/* One step of the paper's Lion on n elements, in f32 with the scalars in
 * f32 as the runtime rounds them:
 *   c = beta1 m + (1 - beta1) g;  p = p (1 - lr wd) - lr sign(c);
 *   m = beta2 m + (1 - beta2) g */
static void paperLion(float *p, float *m, const float *g, int n, double lr,
                      double beta1, double beta2, double wd) {
  const float decay = (float)(1.0 - lr * wd), step = (float)lr;
  const float b1 = (float)beta1, c1 = (float)(1.0 - beta1);
  const float b2 = (float)beta2, c2 = (float)(1.0 - beta2);
  for (int i = 0; i < n; ++i) {
    const float c = b1 * m[i] + c1 * g[i];
    m[i] = b2 * m[i] + c2 * g[i];
    p[i] = p[i] * decay - step * sign(c);
  }
}

static void gradient(float *g, int n, int step) {
  for (int i = 0; i < n; ++i)
    g[i] = (float)((i * 7 + step * 3) % 11 - 5) / 16.0f;
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: capi-lion-test PLAN CHECKPOINT_DIR\n");
    return 2;
  }
  muon_optimizer *opt = NULL;
  EXPECT(muon_optimizer_create(argv[1], NULL, &opt) == MUON_OK);
  if (!opt)
    return 1;

  /* The Lion group by its algorithm's name and settings (beside "muon" and
   * the "adamw" group every plan has). */
  EXPECT(muon_optimizer_group_count(opt) == 3);
  int64_t lionGroup = -1;
  for (int64_t g = 0; g < muon_optimizer_group_count(opt); ++g) {
    muon_group_info info;
    EXPECT(muon_optimizer_group(opt, g, &info) == MUON_OK);
    if (strcmp(info.name, "embed") == 0) {
      lionGroup = g;
      EXPECT(strcmp(info.algorithm, "lion") == 0 && info.orthogonalizes == 0);
    }
  }
  EXPECT(lionGroup >= 0);
  double lr = 0, beta1 = 0, beta2 = 0, wd = 0;
  EXPECT(muon_optimizer_group_setting(opt, "embed", "lr", &lr) == MUON_OK &&
         lr == 0.0003);
  EXPECT(muon_optimizer_group_setting(opt, "embed", "beta2", &beta2) ==
             MUON_OK &&
         beta2 == 0.98);
  EXPECT(muon_optimizer_group_setting(opt, "embed", "weight_decay", &wd) ==
             MUON_OK &&
         wd == 0.1);
  /* Set by name, as a schedule would; refusals say why by their code and
   * change nothing. */
  EXPECT(muon_optimizer_set_group_setting(opt, "embed", "beta1", 0.8) ==
         MUON_OK);
  EXPECT(muon_optimizer_group_setting(opt, "embed", "beta1", &beta1) ==
             MUON_OK &&
         beta1 == 0.8);
  EXPECT(muon_optimizer_set_group_setting(opt, "embed", "beta1", 1.5) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(muon_optimizer_set_group_setting(opt, "embed", "momentum", 0.9) ==
         MUON_INVALID_ARGUMENT);
  EXPECT(strstr(muon_last_error(), "(lion) has no number setting 'momentum'") !=
         NULL);
  EXPECT(muon_optimizer_group_setting(opt, "embed", "beta1", &beta1) ==
             MUON_OK &&
         beta1 == 0.8);
  EXPECT(muon_optimizer_set_group_setting(opt, "embed", "lr", 0.001) ==
         MUON_OK);
  lr = 0.001;

  /* Three steps, against the paper's Lion. */
  static float emb[kEmb], embGrad[kEmb], w[kW], wGrad[kW];
  static float want[kEmb], wantM[kEmb];
  for (int i = 0; i < kEmb; ++i)
    emb[i] = want[i] = (float)(i % 9 - 4) / 8.0f;
  for (int i = 0; i < kW; ++i)
    w[i] = (float)(i % 5 - 2) / 4.0f;
  EXPECT(muon_optimizer_bind(opt, "emb", emb, embGrad, MUON_F32, kEmb) ==
         MUON_OK);
  EXPECT(muon_optimizer_bind(opt, "w", w, wGrad, MUON_F32, kW) == MUON_OK);
  for (int step = 0; step < 3; ++step) {
    gradient(embGrad, kEmb, step);
    gradient(wGrad, kW, step + 1);
    int applied = 0;
    EXPECT(muon_optimizer_step(opt, &applied) == MUON_OK && applied == 1);
    paperLion(want, wantM, embGrad, kEmb, lr, beta1, beta2, wd);
  }
  int same = memcmp(emb, want, sizeof(emb)) == 0;
  EXPECT(same);

  /* A checkpoint round trip restores the values exactly. */
  static float saved[kEmb];
  memcpy(saved, emb, sizeof(emb));
  EXPECT(muon_optimizer_save_checkpoint(opt, argv[2], 1) == MUON_OK);
  for (int i = 0; i < kEmb; ++i)
    emb[i] = 0.0f;
  EXPECT(muon_optimizer_load_checkpoint(opt, argv[2], 1) == MUON_OK);
  EXPECT(memcmp(emb, saved, sizeof(emb)) == 0);
  /* And the momentum with them: the next step is the paper's next step. */
  gradient(embGrad, kEmb, 3);
  gradient(wGrad, kW, 4);
  int applied = 0;
  EXPECT(muon_optimizer_step(opt, &applied) == MUON_OK && applied == 1);
  paperLion(want, wantM, embGrad, kEmb, lr, beta1, beta2, wd);
  EXPECT(memcmp(emb, want, sizeof(emb)) == 0);

  muon_optimizer_destroy(opt);
  printf("capi lion: %d steps, %s, %s\n", 4,
         same ? "equal to the paper bit for bit" : "DIFFERENT from the paper",
         failures ? "FAILED" : "ok");
  return failures ? 1 : 0;
}
