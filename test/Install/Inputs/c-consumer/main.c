/* c-consumer PLAN: loads a one-rank plan through the C API, binds every
 * parameter, runs two steps with a learning rate that changes (as the C++
 * consumer does). */
#include "muon/runtime.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
  muon_optimizer *opt;
  if (argc != 2 || muon_optimizer_create(argv[1], NULL, &opt) != MUON_OK) {
    fprintf(stderr, "%s\n", muon_last_error());
    return 1;
  }
  int64_t count = muon_optimizer_param_count(opt);
  float **storage = calloc((size_t)(2 * count), sizeof(float *));
  for (int64_t i = 0; i < count; ++i) {
    muon_param_info info;
    if (muon_optimizer_param(opt, i, &info) != MUON_OK)
      return 1;
    float *values = malloc((size_t)info.elements * sizeof(float));
    float *grads = malloc((size_t)info.elements * sizeof(float));
    for (int64_t e = 0; e < info.elements; ++e) {
      values[e] = 1.0f;
      grads[e] = 0.25f;
    }
    storage[2 * i] = values;
    storage[2 * i + 1] = grads;
    if (muon_optimizer_bind(opt, info.name, values, grads, MUON_F32,
                            info.elements) != MUON_OK) {
      fprintf(stderr, "%s\n", muon_last_error());
      return 1;
    }
  }
  /* The groups' starting learning rates. */
  int64_t groups = muon_optimizer_group_count(opt);
  double *base = calloc((size_t)groups, sizeof(double));
  for (int64_t g = 0; g < groups; ++g) {
    muon_group_info info;
    if (muon_optimizer_group(opt, g, &info) != MUON_OK ||
        muon_optimizer_group_setting(opt, info.name, "lr", &base[g]) !=
            MUON_OK)
      return 1;
  }
  for (int s = 0; s < 2; ++s) {
    int applied = 0;
    for (int64_t g = 0; g < groups; ++g) {
      muon_group_info info;
      if (muon_optimizer_group(opt, g, &info) != MUON_OK ||
          muon_optimizer_set_group_setting(opt, info.name, "lr",
                                           (s + 1) * 0.5 * base[g]) !=
              MUON_OK) {
        fprintf(stderr, "%s\n", muon_last_error());
        return 1;
      }
    }
    if (muon_optimizer_step(opt, &applied) != MUON_OK || !applied) {
      fprintf(stderr, "%s\n", muon_last_error());
      return 1;
    }
  }
  printf("c consumer: %lld params, %lld steps, first value %.6f\n",
         (long long)count, (long long)muon_optimizer_steps(opt),
         storage[0][0]);
  for (int64_t i = 0; i < 2 * count; ++i)
    free(storage[i]);
  free(storage);
  free(base);
  muon_optimizer_destroy(opt);
  return 0;
}
