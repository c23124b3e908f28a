#!/usr/bin/env python3
"""Writes a Kimi-K2-sized model spec (muon-spec/1) to stdout.

Shapes follow Kimi-K2's public config: 61 layers (the first dense, 60 MoE),
hidden 7168, MLA attention (q_lora 1536, kv_lora 512, 64 heads, qk 128+64,
v 128), 384 routed experts of width 2048 as 3-D stacks plus one shared
expert, dense FFN 18432, vocabulary 163840: about 70,000 Muon matrices.

Mesh: --pp P --dp D --ep E gives P x D ranks. Expert parallelism lives
inside data parallelism, as in Kimi-K2's and DeepSeek-V3's training: the D
data-parallel ranks of a stage are E expert groups of D/E ranks each, so the
mesh is [pp P, ep E, dp D/E] (its "dp" axis is the data-parallel ranks within
one expert group). Layers are spread over pipeline stages (`only`), expert
stacks are split on their expert dim over ep (384/E experts per rank) and
FSDP-split over the inner dp; everything else is FSDP-split over ep x dp,
that is over all D data-parallel ranks. --ep 1 leaves experts unsplit by
expert and FSDP-splits them over all of dp.

Default (pp 16, dp 128, ep 16): 2048 ranks, mesh [16, 16, 8], the inventory
the dry-run benchmark has always used. The plan-scale benchmark uses
--pp 8 --dp 256 (2048 ranks) and --pp 8 --dp 2048 (16,384 ranks), ep 16.
"""
import argparse
import json
import sys

LAYERS, HIDDEN, EXPERTS, MOE_FF, DENSE_FF, VOCAB = 61, 7168, 384, 2048, 18432, 163840
Q_LORA, KV_LORA, HEADS, QK_NOPE, QK_ROPE, V_HEAD = 1536, 512, 64, 128, 64, 128
PP, EP, DP = 16, 16, 8  # set from the options in main(); DP is dp within one ep group


def stage(layer):
    return layer * PP // LAYERS


def dense(name, shape, st, optimizer=None):
    p = {"name": name, "shape": shape, "split": {"0": ["ep", "dp"]}, "only": {"pp": st}}
    if optimizer:
        p["optimizer"] = optimizer
    return p


def main():
    global PP, EP, DP
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pp", type=int, default=16, help="pipeline stages (default 16)")
    ap.add_argument("--dp", type=int, default=128,
                    help="data-parallel ranks per stage, ep included (default 128)")
    ap.add_argument("--ep", type=int, default=16,
                    help="expert-parallel groups within dp (default 16; divides --dp and 384)")
    a = ap.parse_args()
    if a.pp < 1 or a.pp > LAYERS or a.ep < 1 or a.dp < 1 or a.dp % a.ep or EXPERTS % a.ep:
        ap.error("need 1 <= pp <= %d, ep dividing both dp and %d" % (LAYERS, EXPERTS))
    PP, EP, DP = a.pp, a.ep, a.dp // a.ep
    params = [dense("embed", [VOCAB, HIDDEN], 0, "adamw")]
    for l in range(LAYERS):
        st, p = stage(l), f"layers.{l}."
        params += [
            dense(p + "input_layernorm", [HIDDEN], st),
            dense(p + "attn.q_a_proj", [Q_LORA, HIDDEN], st),
            dense(p + "attn.q_a_layernorm", [Q_LORA], st),
            dense(p + "attn.q_b_proj", [HEADS * (QK_NOPE + QK_ROPE), Q_LORA], st),
            dense(p + "attn.kv_a_proj_with_mqa", [KV_LORA + QK_ROPE, HIDDEN], st),
            dense(p + "attn.kv_a_layernorm", [KV_LORA], st),
            dense(p + "attn.kv_b_proj", [HEADS * (QK_NOPE + V_HEAD), KV_LORA], st),
            dense(p + "attn.o_proj", [HIDDEN, HEADS * V_HEAD], st),
            dense(p + "post_attention_layernorm", [HIDDEN], st),
        ]
        if l == 0:
            params += [dense(p + "mlp.gate_proj", [DENSE_FF, HIDDEN], st),
                       dense(p + "mlp.up_proj", [DENSE_FF, HIDDEN], st),
                       dense(p + "mlp.down_proj", [HIDDEN, DENSE_FF], st)]
            continue
        params += [dense(p + "mlp.router", [EXPERTS, HIDDEN], st),
                   dense(p + "mlp.shared.gate_proj", [MOE_FF, HIDDEN], st),
                   dense(p + "mlp.shared.up_proj", [MOE_FF, HIDDEN], st),
                   dense(p + "mlp.shared.down_proj", [HIDDEN, MOE_FF], st)]
        for w, shape in (("w1", [EXPERTS, MOE_FF, HIDDEN]), ("w3", [EXPERTS, MOE_FF, HIDDEN]),
                         ("w2", [EXPERTS, HIDDEN, MOE_FF])):
            params.append({"name": p + "mlp.experts." + w, "shape": shape,
                           "split": {"0": ["ep"], "1": ["dp"]}, "only": {"pp": st}})
    params += [dense("norm", [HIDDEN], PP - 1), dense("lm_head", [VOCAB, HIDDEN], PP - 1, "adamw")]
    json.dump({"format": "muon-spec/1",
               "mesh": {"shape": [PP, EP, DP], "names": ["pp", "ep", "dp"]},
               "distributed": {"prefetch_count": 2, "async": True},
               "params": params}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
