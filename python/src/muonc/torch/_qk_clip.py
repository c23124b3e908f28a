"""QK-clip (MuonClip, Kimi K2): its layers as the compiler takes them, and
each step's logits checked before the runtime gets them."""
from __future__ import annotations

import numpy as np
import torch

from .._core import InvalidArgumentError

_LAYER_KEYS = {"name", "query", "key", "num_heads", "num_kv_heads",
               "threshold"}


def compile_layers(threshold, layers, params):
    """qk_clip_layers as the compiler takes them: parameters by name, the
    threshold in every layer. `params`: (parameter, name, group) triples."""
    names = {id(p): name for p, name, _ in params}
    out = []
    for i, layer in enumerate(layers):
        where = f"qk_clip_layers[{i}]"
        if not isinstance(layer, dict):
            raise InvalidArgumentError(f"invalid argument: {where}: expected "
                                       "a dict with name, query, key and "
                                       "num_heads")
        unknown = set(layer) - _LAYER_KEYS
        if unknown:
            raise InvalidArgumentError(f"invalid argument: {where}: unknown "
                                       f"keys {sorted(unknown)}")
        for k in ("name", "query", "key", "num_heads"):
            if k not in layer:
                raise InvalidArgumentError(f"invalid argument: {where}: "
                                           f"missing '{k}'")
        entry = {"name": layer["name"]}
        for k in ("query", "key"):
            v = layer[k]
            if isinstance(v, str):
                entry[k] = v
            elif id(v) in names:
                entry[k] = names[id(v)]
            else:
                raise InvalidArgumentError(
                    f"invalid argument: {where}.{k}: not a parameter of this "
                    "optimizer (give the parameter or its name)")
        entry["num_heads"] = layer["num_heads"]
        if "num_kv_heads" in layer:
            entry["num_kv_heads"] = layer["num_kv_heads"]
        t = layer.get("threshold", threshold)
        if t is None:
            raise InvalidArgumentError(
                f"invalid argument: {where}: no threshold (give "
                "qk_clip_threshold or the layer's 'threshold')")
        entry["threshold"] = float(t)
        out.append(entry)
    return out


def checked_logits(heads_by_layer, name, value):
    """One layer's per-head max logits as a list of floats, checked: a
    known layer, one finite value per query head."""
    if name not in heads_by_layer:
        known = ", ".join(f"'{n}'" for n in heads_by_layer) or "none"
        raise InvalidArgumentError(f"invalid argument: QK-clip: no layer "
                                   f"named {name!r} (the layers: {known})")
    heads = heads_by_layer[name]
    if isinstance(value, torch.Tensor):
        t = value.detach().to(device="cpu", dtype=torch.float64)
    else:
        t = torch.as_tensor(np.asarray(value, dtype=np.float64))
    if tuple(t.shape) != (heads,):
        raise InvalidArgumentError(
            f"invalid argument: QK-clip: layer '{name}' has {heads} query "
            f"heads: expected logits of shape [{heads}], got "
            f"{list(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).nonzero()[0])
        raise InvalidArgumentError(f"invalid argument: QK-clip: layer "
                                   f"'{name}': the logit of head {bad} is "
                                   "not finite")
    return [float(x) for x in t.tolist()]
