"""muonc without torch: compile in process, bind numpy arrays, step."""
import numpy as np
import pytest

import muonc


def model():
    params = [{"name": "w", "shape": [8, 4], "group": "hidden"},
              {"name": "b", "shape": [4], "group": "bias"}]
    groups = [{"name": "hidden", "algorithm": "muon", "lr": 0.02},
              {"name": "bias", "algorithm": "adamw", "lr": 0.01}]
    return params, groups


def test_compile_bind_step_numpy_zero_copy():
    plan = muonc.compile_model(*model())
    opt = muonc.Optimizer(plan)
    assert [p["name"] for p in opt.params()] == ["w", "b"]
    # "auto": bf16 where the CPU has bf16 products (oneDNN), else f32.
    assert opt.ns_dtype in ("f32", "bf16")
    w = np.ones((8, 4), np.float32)
    g = np.linspace(-1, 1, 32, dtype=np.float32).reshape(8, 4)
    b = np.zeros(4, np.float32)
    opt.bind("w", w, g)
    opt.bind("b", b, np.ones(4, np.float32))
    assert opt.step()["applied"]
    # The arrays themselves changed (bound zero-copy).
    assert not np.allclose(w, 1) and np.allclose(b, -0.01)
    state = opt.state_dict()
    assert state["steps"] == 1
    assert state["pieces"][0]["states"]["momentum"].shape == (32,)


def test_step_before_bind_and_bad_bind():
    opt = muonc.Optimizer(muonc.compile_model(*model()))
    with pytest.raises(muonc.MuonError, match="failed precondition"):
        opt.step()
    with pytest.raises(muonc.MuonError, match="holds 32 elements"):
        opt.bind("w", np.ones(3, np.float32), np.ones(3, np.float32))
    with pytest.raises(TypeError):
        opt.bind("w", np.ones(32, np.float64), np.ones(32, np.float64))
    with pytest.raises(muonc.MuonError, match="no parameter named"):
        opt.bind("nope", np.ones(3, np.float32), np.ones(3, np.float32))


def test_compile_errors_name_the_parameter():
    params, groups = model()
    params[0]["placements"] = ["S(5)"]
    with pytest.raises(muonc.MuonError, match="w"):
        muonc.compile_model(params, groups, {"shape": [2], "names": ["dp"]})
    with pytest.raises(ValueError, match="placement"):
        params[0]["placements"] = ["X"]
        muonc.compile_model(params, groups, {"shape": [2], "names": ["dp"]})


def test_group_settings_and_errors():
    opt = muonc.Optimizer(muonc.compile_model(*model()))
    opt.set_group_lr("hidden", 0.5)
    assert opt.groups()[0]["lr"] == 0.5
    with pytest.raises(muonc.MuonError, match="no parameter group"):
        opt.set_group_lr("nope", 0.1)
    # Settings by name; one of the other algorithm is refused, unchanged.
    opt.set_group("hidden", {"momentum": 0.9, "weight_decay_mode": "none"})
    assert opt.groups()[0]["momentum"] == 0.9
    assert opt.groups()[0]["weight_decay_mode"] == "none"
    assert opt.groups()[0]["lr"] == 0.5
    with pytest.raises(muonc.MuonError, match="'betas' is not a Muon group"):
        opt.set_group("hidden", {"betas": (0.9, 0.99), "momentum": 0.5})
    assert opt.groups()[0]["momentum"] == 0.9
    with pytest.raises(muonc.MuonError, match="weight_decay_mode"):
        opt.set_group("hidden", {"weight_decay_mode": "sometimes"})
    with pytest.raises(muonc.MuonError, match="no parameter group"):
        opt.set_group("nope", {"lr": 0.1})


# --- compile_spec: a spec file compiled in process ---------------------------

def spec():
    return {"format": "muon-spec/1",
            "params": [{"name": "w", "shape": [8, 4], "group": "hidden"},
                       {"name": "b", "shape": [4], "group": "bias"}],
            "param_groups": [{"name": "hidden", "algorithm": "muon",
                              "lr": 0.02},
                             {"name": "bias", "algorithm": "adamw",
                              "lr": 0.01}]}


def run_plan(plan, steps=3):
    opt = muonc.Optimizer(plan)
    w = np.linspace(-2, 2, 32, dtype=np.float32).reshape(8, 4)
    b = np.zeros(4, np.float32)
    g = np.cos(np.arange(32, dtype=np.float32)).reshape(8, 4)
    opt.bind("w", w, g)
    opt.bind("b", b, np.ones(4, np.float32))
    for _ in range(steps):
        assert opt.step()["applied"]
    return w, b


def test_compile_spec_from_dict_text_and_path_equals_compile_model(tmp_path):
    import json
    want = run_plan(muonc.compile_model(*model()))
    path = tmp_path / "model.json"
    path.write_text(json.dumps(spec()))
    for source in (spec(), json.dumps(spec()), str(path), path):
        plan = muonc.compile_spec(source)
        assert json.loads(plan.json())["format"].startswith("muon-plan/")
        got = run_plan(plan)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), source


def test_compile_spec_distributed_plan_and_wire_dtype():
    import json
    s = spec()
    s["mesh"] = {"shape": [2], "names": ["dp"]}
    s["distributed"] = {"prefetch_count": 1}
    s["params"][0]["placements"] = ["S(0)"]
    f32 = json.loads(muonc.compile_spec(s).json())
    bf16 = json.loads(muonc.compile_spec(s, wire_dtype="bf16").json())
    assert f32["world_size"] == 2 and bf16["world_size"] == 2
    assert f32["wire_dtype"] == "f32" and bf16["wire_dtype"] == "bf16"
    with pytest.raises(muonc.MuonError,
                       match="plan is for 2 ranks but the communicator has 1"):
        muonc.Optimizer(muonc.compile_spec(s))  # a 2-rank plan, one process


def test_compile_spec_errors(tmp_path):
    s = spec()
    s["params"][0]["shape"] = [8, -4]
    with pytest.raises(muonc.MuonError, match=r"params\[0\]\.shape"):
        muonc.compile_spec(s)
    with pytest.raises(muonc.MuonError, match="cannot read the spec"):
        muonc.compile_spec(str(tmp_path / "missing.json"))
    with pytest.raises(muonc.MuonError, match="wire_dtype 'f16'"):
        muonc.compile_spec(spec(), wire_dtype="f16")
    with pytest.raises(muonc.MuonError, match="not int"):
        muonc.compile_spec(3)
    with pytest.raises(muonc.MuonError):
        muonc.compile_spec("{ not json")


def test_group_settings_table_is_what_the_group_dicts_hold():
    # The runtime's table of group settings (GroupSettings.h) is the one
    # the engine's group dicts are written from: each algorithm's dict
    # holds exactly its settings' keys (beta1 and beta2 as "betas").
    table = muonc._core.group_settings()
    opt = muonc.Optimizer(muonc.compile_model(*model()))
    for group in opt.groups():
        keys = {s["json_key"] for s in table
                if s["algorithm"] == group["algorithm"]}
        assert set(group) == keys | {"name", "algorithm"}, group
    muon = {s["name"]: s for s in table if s["algorithm"] == "muon"}
    assert muon["normuon"]["fixed"] and muon["normuon"]["kind"] == "flag"
    assert muon["normuon_beta2"]["only_with"] == "normuon"
    assert muon["weight_decay_mode"]["names"] == ["decoupled", "cautious",
                                                  "none"]


class _PeerThatNeverAnswers:
    """A communicator of the user's own (rank 0 of 2) whose collectives
    raise `error`, as a torch process group does when a peer is gone."""

    def __init__(self, error):
        self.error = error

    def rank(self):
        return 0

    def size(self):
        return 2

    def all_gather_int(self, value):
        raise self.error

    def all_gather_bytes(self, data):
        raise self.error

    def all_to_all_v(self, *args):
        raise self.error

    def abort(self, code):
        raise AssertionError("abort is for fatal errors only")


def test_a_transport_timeout_is_deadline_exceeded_not_unavailable():
    # The status code travels from the transport to Python unchanged: a
    # TimeoutError in the communicator is DeadlineExceededError (a
    # RuntimeError, as torch.distributed's timeouts are), any other failure
    # UnavailableError.
    s = spec()
    s["mesh"] = {"shape": [2], "names": ["dp"]}
    s["distributed"] = {}
    s["params"][0]["placements"] = ["S(0)"]
    plan = muonc.compile_spec(s)
    with pytest.raises(muonc.DeadlineExceededError,
                       match="comparing plans: python communicator: "
                             "TimeoutError: gone$") as late:
        muonc.Optimizer(plan, _PeerThatNeverAnswers(TimeoutError("gone")))
    assert isinstance(late.value, RuntimeError)
    assert not isinstance(late.value, muonc.UnavailableError)
    with pytest.raises(muonc.UnavailableError,
                       match="ConnectionResetError: connection reset$"):
        muonc.Optimizer(plan, _PeerThatNeverAnswers(
            ConnectionResetError("connection reset")))
