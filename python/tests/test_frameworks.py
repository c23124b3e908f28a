"""muonc.torch.Muon inside the frameworks that own the training loop, with
the real frameworks (pinned in requirements-frameworks.txt): the Hugging
Face Trainer, accelerate, Lightning and torchtitan's optimizer container,
each on a 2-layer GPT-2 (framework_worker.py), under torchrun with 2
processes (gloo) and in one process. What each test checks failed before
muonc bound its plan at the first step (accelerate's FSDP2 swap, the
optimizer made before the process group), before the owner reduction's
state could be saved on one rank (the HF Trainer saves on rank 0 alone),
and before stock clipping took the whole gradient's norm under it
(replicas parted)."""
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("lightning")
pytest.importorskip("torchtitan")
from conftest import free_port  # noqa: E402

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                      "framework_worker.py")


def run(out, scenario, arg=None, world=2):
    """framework_worker.py SCENARIO under torchrun on `world` processes
    (or alone for one); {rank: what it saved}."""
    command = [sys.executable, WORKER, scenario, str(out)] + (
        [arg] if arg else [])
    if world > 1:
        command = [sys.executable, "-m", "torch.distributed.run",
                   f"--nproc_per_node={world}", f"--master_port={free_port()}",
                   "--master_addr=127.0.0.1"] + command[1:]
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false",
               HF_HUB_OFFLINE="1", PYTHONWARNINGS="ignore")
    done = subprocess.run(command, capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    name = scenario + (f"-{arg}" if arg else "")
    return {r: torch.load(os.path.join(out, f"{name}-w{world}.{r}.pt"),
                          weights_only=False) for r in range(world)}


def same(a, b):
    """The names of the parameters that differ in any bit."""
    return [n for n in a if not torch.equal(a[n], b[n])]


def largest_difference(a, b):
    return max((a[n] - b[n]).abs().max().item() for n in a)


def assert_owner_reduced_resumes_on_both_ranks(got):
    """Each rank trained in owner mode, resumed bit for bit, and the two
    replicas agree bit for bit."""
    for r in (0, 1):
        assert got[r]["straight"]["owner_reduced"]
        assert not same(got[r]["straight"]["params"],
                        got[r]["resumed"]["params"])
    assert not same(got[0]["straight"]["params"], got[1]["straight"]["params"])


# --- the Hugging Face Trainer ----------------------------------------------

def test_hf_trainer_one_process_factory_split_and_resume(tmp_path):
    got = run(tmp_path, "hf", "plain", world=1)[0]
    straight, resumed = got["straight"], got["resumed"]
    # MuonFactory's usual split: the 8 hidden matrices in Muon; the
    # embeddings, the head, norms and biases in AdamW.
    assert [(n, k) for n, _, k in straight["groups"]] == [("muon", 8),
                                                          ("adamw", 21)]
    assert straight["world_size"] == 1
    assert not same(straight["params"], resumed["params"])
    assert straight["losses"][-4:] == resumed["losses"]


@pytest.fixture(scope="module")
def hf_two(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf")
    return {mode: run(out, "hf", mode) for mode in ("plain", "early",
                                                    "owner")}


def test_hf_trainer_ddp_resumes_bit_for_bit(hf_two):
    got = hf_two["plain"]
    for r in (0, 1):
        assert got[r]["straight"]["world_size"] == 2
        assert not same(got[r]["straight"]["params"],
                        got[r]["resumed"]["params"])
    assert not same(got[0]["straight"]["params"], got[1]["straight"]["params"])


def test_hf_trainer_with_an_optimizer_made_before_the_process_group(hf_two):
    # Made before TrainingArguments starts the process group: the plan
    # made at the first step spans both ranks, each orthogonalizing its
    # share (a plan made at construction had one rank doing everything).
    got = hf_two["early"]
    assert got[0]["straight"]["world_size"] == 2
    owners = got[0]["straight"]["assignments"]
    assert owners[0] and owners[1] and not set(owners[0]) & set(owners[1])
    assert not same(got[0]["straight"]["params"], got[0]["resumed"]["params"])
    assert not same(got[0]["straight"]["params"],
                    hf_two["plain"][0]["straight"]["params"])


def test_hf_trainer_in_owner_mode_saves_resumes_and_keeps_replicas(hf_two):
    # muonc.torch.hf.reduce_gradients_to_owners(trainer): the Trainer saves
    # the optimizer on rank 0 alone (consolidated before), clips with its
    # stock max_grad_norm (the whole gradient's norm), and resumes.
    got = hf_two["owner"]
    assert_owner_reduced_resumes_on_both_ranks(got)
    assert not same(got[0]["resumed"]["params"], got[1]["resumed"]["params"])
    # The same training as without the owner reduction, up to the order
    # of its sums (rank order, against gloo's all-reduce).
    assert largest_difference(got[0]["straight"]["params"],
                              hf_two["plain"][0]["straight"]["params"]) < 1e-5


# --- accelerate --------------------------------------------------------------

def test_accelerate_fsdp2_path_equals_torch_muon(tmp_path):
    # The optimizer made before prepare(), which fully_shards the model and
    # swaps the groups' tensors: muonc binds to the sharded ones.
    torch_run = run(tmp_path, "accelerate-fsdp2", "torch")[0]
    ours = run(tmp_path, "accelerate-fsdp2", "muonc")[0]
    assert ours["moved"] > 1e-2, ours["moved"]
    for a, b in zip(ours["losses"], torch_run["losses"]):
        assert abs(a - b) <= 2e-4 * abs(b), (ours["losses"],
                                            torch_run["losses"])
    assert ours["losses"][-1] < ours["losses"][0] - 0.3


def test_accelerate_save_state_resumes_bit_for_bit(tmp_path):
    straight = run(tmp_path, "accelerate", "straight")
    resumed = run(tmp_path, "accelerate", "resumed")
    for r in (0, 1):
        assert not same(straight[r]["params"], resumed[r]["params"])
        assert straight[r]["losses"][-4:] == resumed[r]["losses"]


# --- Lightning ---------------------------------------------------------------

def test_lightning_one_process_resumes_bit_for_bit(tmp_path):
    got = run(tmp_path, "lightning", "plain", world=1)[0]
    assert not same(got["straight"]["params"], got["resumed"]["params"])


@pytest.fixture(scope="module")
def lightning_two(tmp_path_factory):
    out = tmp_path_factory.mktemp("lightning")
    return {mode: run(out, "lightning", mode) for mode in ("plain", "owner")}


def test_lightning_ddp_owner_mode_with_gradient_clip_val(lightning_two):
    got = lightning_two["owner"]
    assert_owner_reduced_resumes_on_both_ranks(got)
    plain = lightning_two["plain"]
    assert not same(plain[0]["straight"]["params"],
                    plain[1]["straight"]["params"])
    # DDP's buckets, rebuilt at the resumed run's first step, sum in
    # another grouping: rounding; the owner reduction sums in rank order.
    assert largest_difference(plain[0]["straight"]["params"],
                              plain[0]["resumed"]["params"]) < 1e-5
    assert largest_difference(got[0]["straight"]["params"],
                              plain[0]["straight"]["params"]) < 1e-5


# --- torchtitan ----------------------------------------------------------------

def test_torchtitan_container_under_fsdp2_with_dcp(tmp_path):
    got = run(tmp_path, "torchtitan")
    for r in (0, 1):
        # Its factory signature: (groups, **kwargs), each group with
        # param_names, fused and foreach; both groups in one muonc
        # optimizer over both ranks.
        assert [(g[1], g[2]) for g in got[r]["groups"]] == [(False, True),
                                                           (True, True)]
        assert got[r]["world_size"] == 2
        # Its zero-gradient, lr-0 step that makes the state changes no
        # parameter, and its flat FQN-keyed state resumes bit for bit.
        assert got[r]["lr0_step_unchanged"]
        assert not same(got[r]["straight"], got[r]["resumed"])
    assert "state.lm_head.weight.exp_avg" in got[0]["keys"]
