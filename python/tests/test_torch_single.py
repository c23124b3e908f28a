"""muonc.torch.Muon in one process against torch.optim.Muon / AdamW."""
import copy

import pytest

torch = pytest.importorskip("torch")
import muonc  # noqa: E402
from muonc.torch import Muon, MuonError  # noqa: E402
from conftest import TinyTransformer, batch, loss_of, rel, split_params  # noqa: E402

LR, ADAM_LR = 0.02, 3e-3


def reference_optimizers(model, **muon_kw):
    muon, adamw = split_params(model)
    return [torch.optim.Muon(muon, lr=LR, **muon_kw),
            torch.optim.AdamW(adamw, lr=ADAM_LR)]


def ours(model, **muon_kw):
    muon, adamw = split_params(model)
    return Muon([{"params": muon}, {"params": adamw, "use_muon": False,
                                    "lr": ADAM_LR}], lr=LR, **muon_kw)


def train(model, opts, steps, schedulers=()):
    for s in range(steps):
        x, y = batch(s)
        for o in opts:
            o.zero_grad()
        loss_of(model, x, y).backward()
        for o in opts:
            o.step()
        for sch in schedulers:
            sch.step()


# torch's iteration (the standard form) sums in another order than BLAS:
# f32 rounding, compounded over 10 steps, within 1e-6. The default form on
# wide and tall matrices is the Gram form, whose f32 error is about twice
# the standard form's (docs/performance.md): 2e-6 (measured up to 1.1e-6 on
# an AVX-512 CPU, 9.1e-7 on an AVX2 one).
@pytest.mark.parametrize("form,bound", [("standard", 1e-6), ("auto", 2e-6)])
@pytest.mark.parametrize("kw", [{}, {"nesterov": False, "weight_decay": 0.05},
                                {"adjust_lr_fn": "match_rms_adamw"},
                                {"adjust_lr_fn": "spectral_unclamped"}])
def test_matches_torch_muon_fp32_ns(fp32_torch_muon, kw, form, bound):
    torch.manual_seed(0)
    ref = TinyTransformer()
    model = copy.deepcopy(ref)
    train(ref, reference_optimizers(ref, **kw), 10)
    opt = ours(model, ns_form=form, **kw)
    train(model, [opt], 10)
    worst = max(rel(p, q) for p, q in zip(model.parameters(), ref.parameters()))
    assert worst < bound, worst
    # Something did move: the comparison is not of untouched parameters.
    torch.manual_seed(0)
    fresh = TinyTransformer()
    assert min(rel(p, q) for p, q in zip(model.parameters(), fresh.parameters())) > 1e-4


def test_defaults_are_torch_muons():
    torch.manual_seed(0)
    w = torch.nn.Parameter(torch.randn(4, 4))
    a = torch.optim.Muon([w]).param_groups[0]
    b = Muon([w]).param_groups[0]
    for key in ("lr", "weight_decay", "momentum", "nesterov", "ns_coefficients",
                "eps", "ns_steps", "adjust_lr_fn"):
        assert tuple(a[key]) == tuple(b[key]) if key == "ns_coefficients" \
            else a[key] == b[key], key


def test_lr_scheduler_changes_the_step_as_in_torch(fp32_torch_muon):
    torch.manual_seed(1)
    ref = TinyTransformer()
    model = copy.deepcopy(ref)
    ref_opts = reference_optimizers(ref)
    lam = lambda s: [1.0, 0.5, 0.0, 2.0, 0.25][s % 5]  # noqa: E731
    train(ref, ref_opts, 7, [torch.optim.lr_scheduler.LambdaLR(o, lam)
                             for o in ref_opts])
    opt = ours(model)
    sch = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    train(model, [opt], 7, [sch])
    assert [g["lr"] for g in opt.param_groups] == [LR * lam(7), ADAM_LR * lam(7)]
    worst = max(rel(p, q) for p, q in zip(model.parameters(), ref.parameters()))
    assert worst < 1e-6, worst
    # lr 0 (step 2 of the schedule): the parameters do not move at all.
    before = [p.detach().clone() for p in model.parameters()]
    for g in opt.param_groups:
        g["lr"] = 0.0
    x, y = batch(99)
    opt.zero_grad()
    loss_of(model, x, y).backward()
    opt.step()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))


def test_state_dict_round_trip_continues_identically():
    torch.manual_seed(2)
    a = TinyTransformer()
    b = copy.deepcopy(a)
    opt_a = ours(a)
    train(a, [opt_a], 6)
    opt_b = ours(b)
    train(b, [opt_b], 3)
    saved = opt_b.state_dict()
    assert "momentum_buffer" in saved["state"][0]
    assert saved["param_groups"][0]["lr"] == LR
    opt_c = ours(b)  # a fresh optimizer over the same parameters
    opt_c.load_state_dict(saved)
    assert opt_c.engine.steps_taken == 3
    for s in range(3, 6):
        x, y = batch(s)
        opt_c.zero_grad()
        loss_of(b, x, y).backward()
        opt_c.step()
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_bf16_parameters_bind_zero_copy():
    w = torch.nn.Parameter(torch.randn(8, 4).bfloat16())
    opt = Muon([w], lr=0.1)
    ptr = w.data_ptr()
    w.grad = torch.randn(8, 4).bfloat16()
    before = w.detach().clone()
    opt.step()
    assert w.data_ptr() == ptr and not torch.equal(before, w)


# --- bad inputs: a clear error, nothing changed ------------------------------

def test_grad_none_leaves_a_parameter_untouched_as_torch_does(fp32_torch_muon):
    # Gradients set to None on some steps (a frozen weight, a module unused
    # on a step): torch skips the parameter (no decay, no momentum change,
    # no AdamW step); so do we, step for step.
    torch.manual_seed(3)
    ref = TinyTransformer()
    model = copy.deepcopy(ref)
    ref_opts, opt = reference_optimizers(ref), ours(model)
    names = [n for n, _ in model.named_parameters()]
    skip = {1: {"block.linear2.weight", "head.weight"},
            2: {"block.linear1.weight", "block.norm1.weight"},
            4: set(names)}
    for s in range(6):
        x, y = batch(s)
        for m, opts in ((ref, ref_opts), (model, [opt])):
            for o in opts:
                o.zero_grad()
            loss_of(m, x, y).backward()
            for n, p in m.named_parameters():
                if n in skip.get(s, ()):
                    p.grad = None
            before = {n: p.detach().clone() for n, p in m.named_parameters()}
            for o in opts:
                o.step()
            for n, p in m.named_parameters():
                if n in skip.get(s, ()):
                    assert torch.equal(before[n], p), (s, n)
    worst = max(rel(p, q) for p, q in zip(model.parameters(), ref.parameters()))
    assert worst < 1e-6, worst
    # The state too: AdamW's step count of a skipped parameter lags.
    by_name = dict(model.named_parameters())
    assert opt.state[by_name["block.norm1.weight"]]["step"].item() == 4
    assert opt.state[by_name["block.norm2.weight"]]["step"].item() == 5
    ref_state = {**ref_opts[0].state, **ref_opts[1].state}
    for (n, p), q in zip(model.named_parameters(), ref.parameters()):
        for key, value in ref_state[q].items():
            if key != "step":
                assert rel(opt.state[p][key], value) < 1e-5, (n, key)


def test_last_step_counters_say_what_the_step_did():
    # One process: no bytes cross; the agreement (parameters without a
    # gradient included, which one rank's list settles) is the step's two
    # small collectives, whether the set changes or not.
    torch.manual_seed(3)
    model = TinyTransformer()
    opt = ours(model)
    assert opt.last_step_counters == {}
    head = dict(model.named_parameters())["head.weight"]
    control = []
    for s in range(5):
        x, y = batch(s)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        if s in (1, 2):
            head.grad = None
        opt.step()
        c = opt.last_step_counters
        assert c["bytes_sent"] == c["bytes_received"] == 0
        # Every exchange of a one-process plan is empty: none is run.
        assert c["exchanges"] == 0
        assert c["ns_flops"] > 0
        control.append(c["control_collectives"])
    assert control == [2, 2, 2, 2, 2]


def test_requires_grad_false_is_accepted_and_never_stepped():
    w = torch.nn.Parameter(torch.randn(4, 4))
    frozen = torch.nn.Parameter(torch.randn(4, 4), requires_grad=False)
    opt = Muon([w, frozen], lr=0.1)
    before = frozen.detach().clone()
    for _ in range(2):
        w.grad = torch.randn(4, 4)
        opt.step()
    assert torch.equal(before, frozen)
    assert torch.count_nonzero(opt.state[frozen]["momentum_buffer"]) == 0
    # No gradient anywhere: nothing to do, as in torch.
    w.grad = None
    before = w.detach().clone()
    opt.step()
    assert torch.equal(before, w)


def test_vector_in_a_muon_group():
    with pytest.raises(MuonError, match="use_muon=False"):
        Muon([{"params": [torch.nn.Parameter(torch.randn(4))],
               "use_muon": True}])


def test_mixed_group_needs_use_muon():
    with pytest.raises(MuonError, match="use_muon"):
        Muon([torch.nn.Parameter(torch.randn(4, 4)),
              torch.nn.Parameter(torch.randn(4))])


def test_groups_with_their_own_newton_schulz_as_in_torch(fp32_torch_muon):
    # Muon groups may differ in ns_steps, ns_coefficients and eps as in
    # torch.optim.Muon: one plan runs each group's configuration (its
    # batches never mix them).
    torch.manual_seed(10)
    ref = TinyTransformer()
    model = copy.deepcopy(ref)
    settings = [{}, {"ns_steps": 3, "ns_coefficients": (3.0, -3.2, 1.2)},
                {"ns_steps": 7, "eps": 1e-5}]

    def groups(m, torch_style):
        muon, adamw = split_params(m)
        out = [dict({"params": muon[i::3]}, **kw)
               for i, kw in enumerate(settings)]
        if torch_style:
            return [torch.optim.Muon(out, lr=LR),
                    torch.optim.AdamW(adamw, lr=ADAM_LR)]
        return [Muon(out + [{"params": adamw, "use_muon": False,
                             "lr": ADAM_LR}], lr=LR, ns_form="standard")]

    train(ref, groups(ref, True), 6)
    opts = groups(model, False)
    train(model, opts, 6)
    # 7 Newton-Schulz steps in f32 round more than 5: every group at 7
    # steps is 3.8e-6 from torch's after 6 training steps; this is 1.9e-6.
    worst = max(rel(p, q) for p, q in zip(model.parameters(), ref.parameters()))
    assert worst < 5e-6, worst
    # Not the default settings' result: the groups' own ran.
    torch.manual_seed(10)
    default = TinyTransformer()
    train(default, [ours(default)], 6)
    assert max(rel(p, q) for p, q in
               zip(model.parameters(), default.parameters())) > 1e-4


def test_plan_settings_changed_between_steps_as_in_torch(fp32_torch_muon):
    # ns_steps, ns_coefficients and eps are compiled into the plan; changed
    # between steps (as torch.optim.Muon allows), the plan is compiled again
    # with the state kept, and the steps stay torch's.
    torch.manual_seed(8)
    ref = TinyTransformer()
    model = copy.deepcopy(ref)
    ref_opts, opt = reference_optimizers(ref), ours(model)
    train(ref, ref_opts, 2)
    train(model, [opt], 2)
    for g in (ref_opts[0].param_groups[0], opt.param_groups[0]):
        g["ns_steps"], g["ns_coefficients"], g["eps"] = 3, (3.0, -3.2, 1.2), 1e-6
    engine = opt.engine
    for s in range(2, 4):
        x, y = batch(s)
        for m, opts in ((ref, ref_opts), (model, [opt])):
            for o in opts:
                o.zero_grad()
            loss_of(m, x, y).backward()
            for o in opts:
                o.step()
    assert opt.engine is not engine
    worst = max(rel(p, q) for p, q in zip(model.parameters(), ref.parameters()))
    assert worst < 1e-6, worst


def test_bad_settings():
    w = torch.nn.Parameter(torch.randn(4, 4))
    with pytest.raises(ValueError, match="Adjust learning rate function "
                       "shape_scaling is not supported"):
        Muon([w], adjust_lr_fn="shape_scaling")
    with pytest.raises(ValueError, match="Learning rate"):
        Muon([w], lr=-1)
    opt = Muon([w])
    opt.param_groups[0]["momentum"] = -0.5
    w.grad = torch.randn(4, 4)
    before = w.detach().clone()
    with pytest.raises(MuonError, match="momentum"):
        opt.step()
    assert torch.equal(before, w)


def test_add_param_group_equals_the_all_groups_optimizer():
    # A group added after two steps: the existing state carries over bit for
    # bit, and the steps that follow equal an optimizer built with every
    # group whose new parameters had no gradient before (torch's semantics).
    torch.manual_seed(9)
    a = TinyTransformer()
    b = copy.deepcopy(a)
    muon_a, adamw_a = split_params(a)
    muon_b, adamw_b = split_params(b)
    late_a, late_b = muon_a[-2:], muon_b[-2:]
    opt_a = Muon([{"params": muon_a[:-2]}, {"params": adamw_a, "use_muon": False,
                                            "lr": ADAM_LR}], lr=LR)
    opt_b = Muon([{"params": muon_b[:-2]}, {"params": adamw_b, "use_muon": False,
                                            "lr": ADAM_LR},
                  {"params": late_b, "ns_steps": 4}], lr=LR)
    for s in range(2):
        x, y = batch(s)
        for m, o, late in ((a, opt_a, late_a), (b, opt_b, late_b)):
            o.zero_grad()
            loss_of(m, x, y).backward()
            for p in late:
                p.grad = None
            o.step()
    kept = {i: {k: v.clone() for k, v in opt_a.state[p].items()}
            for i, p in enumerate(muon_a[:-2] + adamw_a)}
    opt_a.add_param_group({"params": late_a, "ns_steps": 4})
    assert opt_a.param_names == opt_b.param_names
    for i, p in enumerate(muon_a[:-2] + adamw_a):
        for k, v in kept[i].items():
            assert torch.equal(opt_a.state[p][k], v), (i, k)
    train_from(a, opt_a, 2, 5)
    train_from(b, opt_b, 2, 5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    sa, sb = opt_a.state_dict(), opt_b.state_dict()
    for i in sb["state"]:
        for k, v in sb["state"][i].items():
            assert torch.equal(sa["state"][i][k], v), (i, k)


def test_add_param_group_refused_changes_nothing():
    w = torch.nn.Parameter(torch.randn(4, 4))
    opt = Muon([w], lr=0.1)
    with pytest.raises(ValueError, match="some parameters appear in more "
                       "than one parameter group"):
        opt.add_param_group({"params": [w]})
    with pytest.raises(ValueError, match="Muon only supports 2D"):
        opt.add_param_group({"params": [torch.nn.Parameter(torch.randn(2, 2, 2))],
                             "use_muon": True})
    assert len(opt.param_groups) == 1 and opt.param_names == ["group0.0"]
    w.grad = torch.randn(4, 4)
    opt.step()


def test_unsupported_dtype():
    with pytest.raises(MuonError, match="float64"):
        Muon([torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float64))])


# --- parameter names ---------------------------------------------------------

def named_groups(model):
    muon, adamw = [], []
    for n, p in model.named_parameters():
        (muon if p.ndim == 2 and "embed" not in n else adamw).append((n, p))
    return [{"params": muon}, {"params": adamw, "use_muon": False,
                               "lr": ADAM_LR}]


def test_named_parameters_name_the_plan():
    torch.manual_seed(4)
    model = TinyTransformer()
    opt = Muon(named_groups(model), lr=LR)
    assert opt.param_names[:2] == ["block.self_attn.in_proj_weight",
                                   "block.self_attn.out_proj.weight"]
    assert opt.param_groups[0]["param_names"] == opt.param_names[:5]
    owned = sorted(m for ms in opt.assignments.values() for m in ms)
    assert owned == sorted(opt.param_names[:5])
    # Messages name the module's parameter.
    x, y = batch(0)
    loss_of(model, x, y).backward()
    model.block.linear2.weight.grad[0, 0] = float("nan")
    with pytest.warns(UserWarning, match="gradient of block.linear2.weight "
                      "has NaN"):
        opt.step()
    # The same names from a config made from the module, with plain
    # parameter lists; without either, "<group>.<index>" as before.
    muon, adamw = split_params(model)
    groups = [{"params": muon}, {"params": adamw, "use_muon": False}]
    named = Muon(groups, distributed_config=muonc.torch.create_dtensor_config(model))
    assert named.param_names == opt.param_names
    assert Muon(groups).param_names[:2] == ["group0.0", "group0.1"]


def test_named_and_unnamed_training_are_identical():
    torch.manual_seed(5)
    a = TinyTransformer()
    b = copy.deepcopy(a)
    train(a, [ours(a)], 3)
    train(b, [Muon(named_groups(b), lr=LR)], 3)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_model_parameter_in_no_group():
    model = TinyTransformer()
    muon, adamw = split_params(model)
    config = muonc.torch.create_dtensor_config(model)
    with pytest.raises(MuonError, match=r"'block.norm2.weight' of the model .* "
                       "in no parameter group"):
        Muon([{"params": muon}, {"params": adamw[:-1], "use_muon": False}],
             distributed_config=config)
    stranger = torch.nn.Parameter(torch.randn(4, 4))
    with pytest.raises(MuonError, match="'group2.0' is not a parameter of the "
                       "model"):
        Muon([{"params": muon}, {"params": adamw, "use_muon": False},
              {"params": [stranger]}], distributed_config=config)


def test_parameters_on_mixed_devices():
    # Devices are read where the plan is made, at the first step: until
    # then a framework may still move the parameters (to_empty from meta).
    w = torch.nn.Parameter(torch.randn(4, 4))
    m = torch.nn.Parameter(torch.empty(4, 4, device="meta"))
    opt = Muon([("a", w), ("b", m)])
    w.grad = torch.randn(4, 4)
    with pytest.raises(MuonError, match=r"'a' on cpu, 'b' on meta"):
        opt.step()
    opt = Muon([m])
    with pytest.raises(MuonError, match=r"'group0.0' on meta"):
        opt.state_dict()
        opt.engine


# --- torch.distributed.checkpoint's state dict API ---------------------------

def test_distributed_checkpoint_state_dict_round_trip():
    from torch.distributed.checkpoint.state_dict import (
        get_state_dict, set_optimizer_state_dict)
    torch.manual_seed(6)
    a = TinyTransformer()
    b = copy.deepcopy(a)
    opt_a = Muon(named_groups(a), lr=LR)
    train(a, [opt_a], 5)
    opt_b = Muon(named_groups(b), lr=LR)
    train(b, [opt_b], 3)
    _, osd = get_state_dict(b, opt_b)
    # By parameter name, in torch.optim's keys.
    assert set(osd["state"]["block.linear1.weight"]) == {"momentum_buffer"}
    assert set(osd["state"]["embed.weight"]) == {"exp_avg", "exp_avg_sq",
                                                 "step"}
    assert osd["state"]["embed.weight"]["step"].item() == 3
    assert opt_b.engine.steps_taken == 3  # get_state_dict did not step it
    saved = copy.deepcopy(osd)
    opt_c = Muon(named_groups(b), lr=LR)  # fresh, same parameters
    set_optimizer_state_dict(b, opt_c, saved)
    assert opt_c.engine.steps_taken == 3
    train_from(b, opt_c, 3, 5)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_load_state_dict_keyword_and_torch_format():
    torch.manual_seed(7)
    a = TinyTransformer()
    b = copy.deepcopy(a)
    opt_a = ours(a)
    train(a, [opt_a], 4)
    opt_b = ours(b)
    train(b, [opt_b], 2)
    saved = copy.deepcopy(opt_b.state_dict())
    for entry in saved["state"].values():  # torch.optim's own keys only
        assert set(entry) <= {"momentum_buffer", "exp_avg", "exp_avg_sq", "step"}
    opt_c = ours(b)
    opt_c.load_state_dict(state_dict=saved)
    train_from(b, opt_c, 2, 4)
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_load_state_dict_refuses_implausible_state():
    """load_state_dict loads through the runtime's loadStateDict, which
    checks what it would apply: a negative exp_avg_sq or a NaN momentum is
    refused, naming the state, the parameter and the element, and the
    optimizer keeps its state and step count."""
    torch.manual_seed(11)
    model = TinyTransformer()
    opt = ours(model)
    train(model, [opt], 2)
    before = copy.deepcopy(opt.state_dict())
    muon_at = next(i for i, e in before["state"].items()
                   if "momentum_buffer" in e)
    adamw_at = next(i for i, e in before["state"].items() if "exp_avg_sq" in e)
    negative = copy.deepcopy(before)
    negative["state"][adamw_at]["exp_avg_sq"].view(-1)[1] = -0.5
    nan = copy.deepcopy(before)
    nan["state"][muon_at]["momentum_buffer"].view(-1)[0] = float("nan")
    for bad, match in (
            (negative, r"the exp_avg_sq state of '[^']+' at \[[0-9, ]+\] is "
                       r"-0.5, below zero"),
            (nan, r"the momentum state of '[^']+' at \[[0-9, ]+\] is nan "
                  r"\(it must be finite\)")):
        with pytest.raises(MuonError, match=match):
            opt.load_state_dict(bad)
        assert opt.engine.steps_taken == 2
        after = opt.state_dict()
        for i, entry in before["state"].items():
            for key, value in entry.items():
                assert torch.equal(after["state"][i][key], value), (i, key)


def test_state_keys_follow_the_runtime_slot_table():
    """Each parameter's torch state holds exactly its algorithm's
    per-element slots of the runtime's table (_core.element_slots(); Muon's
    momentum under torch's name momentum_buffer), plus AdamW's step."""
    from muonc import _core
    torch.manual_seed(3)
    model = TinyTransformer()
    opt = ours(model)
    train(model, [opt], 1)
    saved = opt.state_dict()
    slots = {a["name"]: set() for a in _core.algorithms()}
    for s in _core.element_slots():
        slots[s["algorithm"]].add(
            {"momentum": "momentum_buffer"}.get(s["name"], s["name"]))
    assert "momentum_buffer" in slots["muon"]
    assert {"exp_avg", "exp_avg_sq"} <= slots["adamw"]
    index = 0
    for group in opt.param_groups:
        want = (slots["muon"] if group["use_muon"]
                else slots["adamw"] | {"step"})
        for p in group["params"]:
            assert set(saved["state"][index]) == want, (index, group["name"])
            for key in want - {"step"}:
                assert saved["state"][index][key].shape == p.shape
            index += 1
    assert index == len(saved["state"])


def train_from(model, opt, start, stop):
    for s in range(start, stop):
        x, y = batch(s)
        opt.zero_grad()
        loss_of(model, x, y).backward()
        opt.step()


def one_step(w0, grad, **kw):
    """w0 after one step of ours with gradient `grad` (fresh state)."""
    w = torch.nn.Parameter(w0.clone())
    opt = Muon([w], lr=LR, **kw)
    w.grad = grad.clone()
    opt.step()
    return w.detach()


def test_scale_modes_and_weight_decay_modes_from_their_formulas():
    # One step from the same values and gradient: the orthogonalized update
    # O is the same in every run, so each mode's result follows from two
    # reference runs by the formulas of docs/spec-format.md 1.3.
    torch.manual_seed(0)
    rows, cols, wd = 12, 20, 0.1
    w0, g = torch.randn(rows, cols), torch.randn(rows, cols)
    plain = one_step(w0, g, weight_decay=wd, weight_decay_mode="none")
    assert torch.equal(plain, one_step(w0, g, weight_decay=0.0))
    step = w0 - plain  # lr * sqrt(max(1, rows/cols)) * O, original = 1 * lr
    factors = {"original": 1.0, "match_rms_adamw": 0.2 * max(rows, cols) ** 0.5,
               "spectral": max(rows, cols) ** 0.5,
               "unit_rms_norm": (rows / cols) ** 0.5,
               "spectral_unclamped": (rows / cols) ** 0.5}
    for name, factor in factors.items():
        moved = w0 - one_step(w0, g, weight_decay=0.0, adjust_lr_fn=name)
        assert torch.allclose(moved, step * factor, rtol=1e-5, atol=2e-6), name
    # Decoupled decay scales every element; cautious only those whose update
    # (O, subtracted) agrees in sign with the value: O * w >= 0.
    decoupled = one_step(w0, g, weight_decay=wd)
    assert torch.equal(decoupled, one_step(w0, g, weight_decay=wd,
                                           weight_decay_mode="decoupled"))
    assert torch.allclose(decoupled, w0 * (1 - LR * wd) - step, atol=1e-6)
    cautious = one_step(w0, g, weight_decay=wd, weight_decay_mode="cautious")
    agree = step * w0 >= 0
    assert 0 < int(agree.sum()) < agree.numel()
    assert torch.equal(cautious, torch.where(agree, decoupled, plain))


def test_bad_weight_decay_mode():
    w = torch.nn.Parameter(torch.randn(4, 4))
    with pytest.raises(MuonError, match="weight_decay_mode 'cautius'"):
        Muon([w], weight_decay_mode="cautius")


def test_gram_form_within_rounding_of_torch(fp32_torch_muon):
    # ns_form="gram", and auto (the default) with Jordan's coefficients: the
    # in_proj (48x16), linear1 (32x16), linear2 (16x32) and head (32x16)
    # matrices run Newton-Schulz through their Gram matrix. Same
    # polynomials, another rounding: within 2e-6 of torch's f32 iteration
    # after 10 steps (measured 9.1e-7, the standard form 6.5e-7; bf16's own
    # rounding is 1e-2), and not the standard form's bits.
    torch.manual_seed(0)
    ref = TinyTransformer()
    standard, gram, default = (copy.deepcopy(ref) for _ in range(3))
    train(ref, reference_optimizers(ref), 10)
    train(standard, [ours(standard, ns_form="standard")], 10)
    train(gram, [ours(gram, ns_form="gram")], 10)
    train(default, [ours(default)], 10)
    assert all(torch.equal(p, q) for p, q in
               zip(gram.parameters(), default.parameters()))
    worst = max(rel(p, q) for p, q in zip(gram.parameters(), ref.parameters()))
    assert worst < 2e-6, worst
    named = dict(gram.named_parameters())
    differ = [n for n, p in standard.named_parameters()
              if not torch.equal(p, named[n])]
    assert "block.self_attn.in_proj_weight" in differ, differ
    with pytest.raises(MuonError, match="ns_form 'fast': expected 'auto', 'standard' or 'gram'"):
        ours(TinyTransformer(), ns_form="fast")


def test_bf16_default_form_as_close_to_f32_as_torchs_bf16(fp32_torch_muon):
    # ns_dtype="bf16", ns_form auto (the default): where the CPU runs bf16
    # on oneDNN, the wide and tall matrices' steps go through their Gram
    # matrix in phases of 2 (runtime.md, "The Gram form in bf16"); with
    # ns_form="standard" every step is torch's. After 10 steps each is
    # compared with torch.optim.Muon's f32 iteration: the default stays
    # within 1.5x of the standard form's distance (bf16's own rounding:
    # measured 9.4e-3 for the default, 1.0e-2 for the standard form), and
    # where the Gram form runs it gives other bits than the standard form.
    described = muonc.cpu_newton_schulz("bf16")
    gram_runs = "Gram form" in described
    assert gram_runs == ("Gram form" in muonc.cpu_newton_schulz("bf16", "gram"))
    assert "Gram form" not in muonc.cpu_newton_schulz("bf16", "standard")
    assert "Gram form" in muonc.cpu_newton_schulz("f32")
    assert "Gram form" not in muonc.cpu_newton_schulz("f32", "standard")
    assert "Gram form" in muonc.cpu_newton_schulz("f32", "gram")
    torch.manual_seed(0)
    ref = TinyTransformer()
    default, standard = copy.deepcopy(ref), copy.deepcopy(ref)
    train(ref, reference_optimizers(ref), 10)
    train(default, [ours(default, ns_dtype="bf16")], 10)
    train(standard, [ours(standard, ns_dtype="bf16", ns_form="standard")], 10)
    names = [n for n, _ in ref.named_parameters()]
    far = dict(zip(names, (rel(p, q) for p, q in
                           zip(default.parameters(), ref.parameters()))))
    far_standard = dict(zip(names, (rel(p, q) for p, q in
                                    zip(standard.parameters(), ref.parameters()))))
    worst, worst_standard = max(far.values()), max(far_standard.values())
    assert worst_standard > 1e-5, worst_standard  # bf16 ran
    assert worst < 1.5 * worst_standard, (far, far_standard)
    in_proj = "block.self_attn.in_proj_weight"
    same = torch.equal(dict(default.named_parameters())[in_proj],
                       dict(standard.named_parameters())[in_proj])
    assert same != gram_runs, described
    with pytest.raises(MuonError, match="ns_form 'fast'"):
        muonc.cpu_newton_schulz("bf16", "fast")
