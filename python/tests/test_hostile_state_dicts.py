"""Generated mutations of a real state dict fed to load_state_dict, in one
process and on 2 ranks: each is refused with a builtin exception that
names the entry (never a C++ exception's text), or loads as torch would
load it; after a refusal nothing changed (the optimizer steps bit for bit
as a twin that never saw the dict), and no load makes a step write
non-finite parameters."""
import copy
import math
import random

import pytest

torch = pytest.importorskip("torch")
from muonc.torch import Muon  # noqa: E402
from conftest import TinyTransformer, batch, loss_of, run_ranks, split_params  # noqa: E402

BUILTIN = (ValueError, TypeError, KeyError, IndexError, RuntimeError)


def make(seed=0):
    torch.manual_seed(seed)
    model = TinyTransformer()
    muon, adamw = split_params(model)
    opt = Muon([{"params": muon, "name": "hidden"},
                {"params": adamw, "use_muon": False, "lr": 3e-3,
                 "name": "rest"}], lr=0.02)
    for s in range(2):
        x, y = batch(s)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()
    return model, opt


# Values of the wrong kind for anything: each a (value, what it is).
ODD = [None, "0.02", [1, 2], {"a": 1}, float("nan"), float("inf"), -1.0,
       1e30, 2 ** 70, True, torch.tensor([1.0, 2.0]),
       torch.tensor(float("nan")), object()]


def mutations(saved, rng, count):
    """`count` (description, hint, mutate) triples over `saved`: the state
    entries, their tensors and steps, the groups' keys, the dict's
    outline. `hint`: a word the error must contain where it raises."""
    state_keys = list(saved["state"])
    out = []

    def entry(d, i):
        return d["state"][state_keys[i % len(state_keys)]]

    for n in range(count):
        kind = rng.randrange(9)
        i = rng.randrange(len(state_keys))
        odd = rng.choice(ODD)
        g = rng.randrange(len(saved["param_groups"]))
        if kind == 0:  # a whole entry replaced
            out.append((f"state[{i}] = {odd!r}", "state",
                        lambda d, i=i, v=odd: d["state"].__setitem__(
                            state_keys[i], v)))
        elif kind == 1:  # a state tensor replaced
            key = rng.choice(["momentum_buffer", "exp_avg", "exp_avg_sq"])
            out.append((f"state[{i}][{key}] = {odd!r}", key,
                        lambda d, i=i, k=key, v=odd: entry(d, i).__setitem__(
                            k, v) if k in entry(d, i) else
                        entry(d, i).__setitem__("step", v)))
        elif kind == 2:  # a tensor's values or shape
            how = rng.choice(["nan", "inf", "negative", "shape", "int",
                              "complex", "scalar", "huge"])

            def tensor(d, i=i, how=how):
                e = entry(d, i)
                k = next(k for k in e if k != "step")
                t = e[k].clone()
                if how == "nan":
                    t.view(-1)[0] = float("nan")
                elif how == "inf":
                    t.view(-1)[-1] = float("inf")
                elif how == "negative":
                    t.view(-1)[0] = -1.0
                elif how == "huge":  # finite, and as large as float32 goes
                    t.view(-1)[0] = 3e38
                elif how == "shape":
                    t = torch.zeros(t.shape[0] + 1, *t.shape[1:])
                elif how == "int":
                    t = t.to(torch.int64)
                elif how == "complex":
                    t = t.to(torch.complex64)
                else:
                    t = torch.tensor(0.0)
                e[k] = t
            out.append((f"state[{i}] tensor {how}", "state", tensor))
        elif kind == 3:  # a step count
            value = rng.choice([-1, 1e30, 2.5, float("nan"), "3", None, 2 ** 60,
                                torch.tensor([1.0, 2.0]), True, 7])
            out.append((f"state[{i}].step = {value!r}", "step",
                        lambda d, i=i, v=value: entry(d, i).__setitem__(
                            "step", v)))
        elif kind == 4:  # a group's hyper-parameter
            key = rng.choice(["lr", "momentum", "weight_decay", "eps",
                              "betas", "ns_steps", "ns_coefficients",
                              "adjust_lr_fn", "weight_decay_mode",
                              "nesterov", "normuon_beta2",
                              "extra_scale_factor"])
            value = rng.choice(ODD + [(0.9,), (1.5, 0.9), 0, 1000, 2.5,
                                      (1.0, 2.0), (3.4445, -1e308, 2.0315),
                                      (64.0, 64.0, 64.0), "bogus", 1.5])
            out.append((f"param_groups[{g}][{key}] = {value!r}", key,
                        lambda d, g=g, k=key, v=value:
                        d["param_groups"][g].__setitem__(k, v)))
        elif kind == 5:  # the keys that fix a group's structure
            key, value = rng.choice([("use_muon", True), ("use_muon", False),
                                     ("use_muon", "yes"), ("algorithm", "lion"),
                                     ("algorithm", "bogus"),
                                     ("muonc_steps", -1), ("muonc_steps", 1e30),
                                     ("muonc_steps", "x"), ("name", 7)])
            out.append((f"param_groups[{g}][{key}] = {value!r}", key,
                        lambda d, g=g, k=key, v=value:
                        d["param_groups"][g].__setitem__(k, v)))
        elif kind == 6:  # a key removed
            where = rng.choice(["state", "param_groups", "params", "lr",
                                "momentum_buffer", "exp_avg"])

            def remove(d, where=where, g=g, i=i):
                if where in ("state", "param_groups"):
                    del d[where]
                elif where in ("params", "lr"):
                    d["param_groups"][g].pop(where, None)
                else:
                    entry(d, i).pop(where, None)
            out.append((f"without {where}", where, remove))
        elif kind == 7:  # the groups' outline
            how = rng.choice(["extra group", "one group", "param more",
                              "param less", "unknown state key"])

            def outline(d, how=how, g=g):
                if how == "extra group":
                    d["param_groups"].append(copy.deepcopy(
                        d["param_groups"][0]))
                elif how == "one group":
                    d["param_groups"].pop()
                elif how == "param more":
                    d["param_groups"][g]["params"].append(999)
                elif how == "param less":
                    d["param_groups"][g]["params"].pop()
                else:
                    d["state"][12345] = {"momentum_buffer": torch.zeros(3)}
            out.append((how, "group", outline))
        else:  # several at once
            a, b = rng.sample(out, 2) if len(out) > 1 else (None, None)
            if a is None:
                continue
            out.append((f"{a[0]} and {b[0]}", "",
                        lambda d, a=a, b=b: (a[2](d), b[2](d))))
    return out[:count]


def equal(a, b):
    """Equal values, tensors and NaNs included; other objects (a group key
    torch keeps as given) by their type."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) \
            and a.shape == b.shape and a.dtype == b.dtype and \
            torch.equal(a.nan_to_num(), b.nan_to_num())
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and \
            all(equal(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and \
            all(equal(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, (int, float, str, bytes, type(None))):
        return type(a) is type(b) and a == b
    return type(a) is type(b)  # deep copies of one object


def same_state(a, b):
    return equal(a["param_groups"], b["param_groups"]) and \
        equal(a["state"], b["state"])


def run_mutations(count, seed, rank=None):
    """Loads `count` mutations into one optimizer beside an untouched twin;
    returns (refused, accepted, problems)."""
    rng = random.Random(seed)
    model, opt = make()
    twin_model, twin = make()
    saved = copy.deepcopy(opt.state_dict())
    problems, refused, accepted = [], 0, 0
    for n, (what, hint, mutate) in enumerate(mutations(saved, rng, count)):
        before = copy.deepcopy(opt.state_dict())
        bad = copy.deepcopy(saved)
        try:
            mutate(bad)
        except Exception:
            continue  # the mutation did not apply to this dict
        try:
            opt.load_state_dict(bad)
            accepted += 1
            # Loaded as torch would: a step writes finite parameters; then
            # back to the saved state for the next mutation.
            x, y = batch(1000 + n)
            opt.zero_grad()
            loss_of(model, x, y).backward()
            opt.step()
            if not all(torch.isfinite(p).all() for p in model.parameters()):
                problems.append(f"{what}: non-finite parameters")
            with torch.no_grad():
                for p, q in zip(model.parameters(), twin_model.parameters()):
                    p.copy_(q)
            opt.load_state_dict(copy.deepcopy(before))
        except Exception as e:  # noqa: BLE001 (every kind is checked)
            refused += 1
            text = str(e)
            if not isinstance(e, BUILTIN) or "bad_cast" in text or \
                    "std::" in text or not text:
                problems.append(f"{what}: {type(e).__name__}: {text[:200]}")
            elif hint and hint not in text and not any(
                    w in text for w in ("state", "param_groups", "parameter",
                                        "group")):
                problems.append(f"{what}: does not name it: {text[:200]}")
            try:
                if not same_state(opt.state_dict(), before):
                    problems.append(f"{what}: the state changed")
            except Exception as e2:  # noqa: BLE001
                problems.append(f"{what}: broken after: {e2!r}")
        # Every few mutations: still the twin's optimizer, bit for bit.
        if n % 10 == 9:
            x, y = batch(2000 + n)
            for m, o in ((model, opt), (twin_model, twin)):
                o.zero_grad()
                loss_of(m, x, y).backward()
                o.step()
            if not all(torch.equal(a, b) for a, b in
                       zip(model.parameters(), twin_model.parameters())):
                problems.append(f"after {what}: parts from its twin")
                break
    return refused, accepted, problems


def test_two_hundred_mutations_in_one_process():
    refused, accepted, problems = run_mutations(220, seed=1)
    assert not problems, "\n".join(problems[:20])
    assert refused + accepted >= 200, (refused, accepted)
    assert refused >= 150, (refused, accepted)


def _two_ranks(rank, world, out):
    torch.save(run_mutations(60, seed=2, rank=rank), f"{out}.{rank}")


def test_mutations_on_two_ranks(tmp_path):
    out = str(tmp_path / "hostile")
    run_ranks(_two_ranks, 2, out)
    for rank in (0, 1):
        refused, accepted, problems = torch.load(f"{out}.{rank}")
        assert not problems, "\n".join(problems[:20])
        assert refused + accepted >= 50 and refused >= 30, (refused,
                                                            accepted)
