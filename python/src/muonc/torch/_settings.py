"""The group settings as torch's param_groups hold them.

The settings are described once, in the runtime's table
(muon/Plan/GroupSettings.h, ``_core.group_settings()``); this module maps
them to torch.optim.Muon's keys and checks what torch checks, raising the
exception classes torch raises (muonc's, which are also ValueError etc.).
"""
from __future__ import annotations

import math
import numbers

import torch

from .. import _core
from .._core import InvalidArgumentError, MuonTypeError

DEFAULT_NS_COEFFICIENTS = (3.4445, -4.775, 2.0315)

SETTINGS = _core.group_settings()
# torch.optim.Muon's names where they differ from the runtime's.
_TORCH_NAMES = {"adjust_lr": "adjust_lr_fn"}

# The optimizer state, described once in the runtime too: the per-element
# slots of each algorithm (muon/Plan/ElementState.h), under torch's names
# where they differ, and the per-matrix steps with their per-row state
# (muon/Runtime/MatrixStep.h: NorMuon's normuon_v).
ELEMENT_SLOTS = _core.element_slots()
# The registered algorithms (muon/Plan/Algorithm.h): Muon orthogonalizes
# matrices; the others (AdamW, ...) update each element of a parameter.
ALGORITHMS = _core.algorithms()
ELEMENTWISE = tuple(a["name"] for a in ALGORITHMS if not a["orthogonalizes"])
TORCH_STATE_NAMES = {"momentum": "momentum_buffer"}
MATRIX_STEPS = _core.matrix_steps()

# Newton-Schulz's settings: compiled into the plan (they decide each
# matrix's flops and batches), free to differ between groups.
NS_KEYS = ("ns_coefficients", "eps", "ns_steps")
# Per-head Newton-Schulz: compiled into the plan too (it decides the
# matrices), free to differ between groups.
HEAD_KEYS = ("num_heads", "head_split_dim")
# A group's stacked matrices (torchtitan's GroupedExperts [E, out, in]):
# every dim but the last two indexes a matrix of its own.
STACKED_KEY = "stacked_matrices"


def torch_key(setting):
    """A setting's key in torch's param_groups."""
    return _TORCH_NAMES.get(setting["json_key"], setting["json_key"])


def setting_names(name):
    """The values a Muon setting of closed names takes."""
    return tuple(next(s["names"] for s in SETTINGS
                      if s["algorithm"] == "muon" and s["name"] == name))


ADJUST_LR = setting_names("adjust_lr")
DECAY_MODES = setting_names("weight_decay_mode")
# The settings the plan fixes (NorMuon decides which matrices carry state):
# they may not change after the plan is compiled.
PLAN_KEYS = NS_KEYS + tuple(
    s["name"] for s in SETTINGS if s["algorithm"] == "muon" and s["fixed"])


def element_slots(algorithm):
    """The runtime's per-element state slots of an algorithm."""
    return tuple(s["name"] for s in ELEMENT_SLOTS
                 if s["algorithm"] == algorithm)


def muon_defaults():
    """Every Muon setting of the table by torch's key, with its default."""
    return {torch_key(x): x["default"] for x in SETTINGS
            if x["algorithm"] == "muon"}


def element_defaults(algorithm):
    """Every setting of an element-wise algorithm (AdamW, ...) by its key
    in the table, with its default (settings sharing a key, AdamW's
    "betas", a tuple)."""
    mine = [x for x in SETTINGS if x["algorithm"] == algorithm]
    out = {}
    for key in dict.fromkeys(x["json_key"] for x in mine):
        values = [x["default"] for x in mine if x["json_key"] == key]
        out[key] = tuple(values) if len(values) > 1 else values[0]
    return out


def counts_steps(algorithm):
    """Whether an algorithm's pieces count their steps (AdamW's bias
    correction): torch's state then has "step"."""
    return any(s["carries_step"] for s in ELEMENT_SLOTS
               if s["algorithm"] == algorithm)


def scalar(value):
    """A hyper-parameter as a float: a number, or a 1-element tensor (torch
    takes a tensor lr)."""
    if isinstance(value, torch.Tensor):
        return float(value.item())
    return float(value)


def _table_value(setting, group):
    """group's value of a table setting, as the runtime takes it (torch's
    adjust_lr_fn None is "original"; a shared key's values as a list)."""
    value = group[torch_key(setting)]
    if value is None:
        return setting["default"]
    cast = {"number": scalar, "flag": bool, "name": str}[setting["kind"]]
    if isinstance(value, (tuple, list)):
        return [cast(v) for v in value]
    return cast(value)


def table_settings(group, *, fixed=True):
    """The table's settings of the group's algorithm, by the runtime's
    names: what compile_model and Optimizer.set_group take. A setting of a
    flag that is off is left out (the plan refuses it)."""
    algorithm = group["algorithm"]
    out = {}
    for x in (x for x in SETTINGS if x["algorithm"] == algorithm):
        if not fixed and x["fixed"]:
            continue
        if x["only_with"] and not group.get(x["only_with"]):
            continue
        out[x["json_key"]] = _table_value(x, group)
    return out


def plan_settings(group):
    """What the plan fixes of a Muon group: changing it after the plan is
    compiled is refused."""
    return tuple(repr(group.get(k)) for k in PLAN_KEYS + HEAD_KEYS
                 + (STACKED_KEY,))


# --- torch's checks -----------------------------------------------------

def _number(value, what):
    """A hyper-parameter as a float: a real number or a 1-element real
    tensor (torch takes a tensor lr), finite; a string or another type is
    torch's TypeError (its checks compare it with 0.0), NaN or inf a
    ValueError (a step with it would write non-finite parameters)."""
    if isinstance(value, torch.Tensor):
        if value.numel() != 1:
            raise InvalidArgumentError(f"Tensor {what} must be 1-element")
        if value.is_complex():
            raise MuonTypeError(f"invalid argument: {what} is a complex "
                                "tensor; expected a real number")
        number = float(value.item())
    elif isinstance(value, numbers.Real):
        number = float(value)
    else:
        raise MuonTypeError(
            f"invalid argument: {what} must be a number (float or a "
            f"1-element tensor), not {type(value).__name__} {value!r}")
    if not math.isfinite(number):
        raise InvalidArgumentError(f"invalid argument: {what} is {value!r}; "
                                   "it must be finite")
    return number


# The bounds that keep every step of finite inputs finite (the runtime's
# checkStepBounds, muon/Plan/Validate.h): lr and extra_scale_factor at most
# MAX_STEP_RATE, lr x weight_decay at most 2.
MAX_STEP_RATE = 1e10


def check_lr(lr):
    if isinstance(lr, torch.Tensor) and lr.numel() != 1:
        raise InvalidArgumentError("Tensor lr must be 1-element")
    number = _number(lr, "lr")
    if not 0.0 <= number:
        raise InvalidArgumentError(
            f"Learning rate should be >= 0 but is: {lr}")
    if number > MAX_STEP_RATE:
        raise InvalidArgumentError(
            f"invalid argument: lr {lr} is beyond {MAX_STEP_RATE:g}: a step "
            "would move the parameters past what float32 holds")


def check_decay_product(group):
    """lr x weight_decay at most 2: above it every step multiplies the
    parameters by more than 1 in size, until they overflow."""
    if "weight_decay" not in group:
        return
    product = _number(group["lr"], "lr") * _number(group["weight_decay"],
                                                    "weight_decay")
    if product > 2.0:
        raise InvalidArgumentError(
            f"invalid argument: lr x weight_decay is {product:g}, above 2: "
            "every step would multiply the parameters by more than 1 in "
            "size, until they overflow")


def check_muon_numbers(momentum, weight_decay):
    if not 0.0 <= _number(momentum, "momentum"):
        raise InvalidArgumentError(
            f"momentum should be >= 0 but is: {momentum}")
    if _number(momentum, "momentum") > 1.0:
        raise InvalidArgumentError(
            f"invalid argument: momentum {momentum} is above 1 (the momentum "
            "would grow without bound)")
    if not 0.0 <= _number(weight_decay, "weight_decay"):
        raise InvalidArgumentError(
            f"weight decay should be >= 0 but is: {weight_decay}")


def check_adjust(fn):
    if fn is not None and fn not in ADJUST_LR:
        raise InvalidArgumentError(
            f"Adjust learning rate function {fn} is not supported (None, "
            + ", ".join(repr(n) for n in ADJUST_LR) + ")")


def check_decay_mode(mode):
    if mode not in DECAY_MODES:
        raise InvalidArgumentError(
            f"invalid argument: weight_decay_mode {mode!r} is not supported "
            "('decoupled', 'cautious', 'none')")


def check_normuon(normuon, beta2):
    if not isinstance(normuon, bool):
        raise InvalidArgumentError(f"invalid argument: normuon {normuon!r} "
                                   "is not True or False")
    if not (isinstance(beta2, (int, float)) and 0.0 <= beta2 < 1.0):
        raise InvalidArgumentError(f"invalid argument: normuon_beta2 "
                                   f"{beta2!r} is not a number in [0, 1)")


def check_ns(group, ns_dtype=None):
    """Newton-Schulz's settings of a Muon group, as torch checks them (and
    the plan needs them): steps, 3 finite coefficients per step that keep
    the iteration bounded in the precision it runs in
    (_core.check_ns_coefficients: the largest singular value it can reach
    from a normalized input), eps."""
    steps = group["ns_steps"]
    if not isinstance(steps, numbers.Integral) or isinstance(steps, bool):
        raise MuonTypeError(f"invalid argument: ns_steps {steps!r} is not an "
                            "integer")
    if steps >= 100:
        raise InvalidArgumentError(
            "Number of steps must be less than 100 for computational "
            "efficiency")
    if steps < 1:
        raise InvalidArgumentError(f"invalid argument: ns_steps {steps} is "
                                   "not at least 1")
    coefficients = group["ns_coefficients"]
    if isinstance(coefficients, (str, bytes)) or not hasattr(
            coefficients, "__len__") or len(tuple(coefficients)) != 3:
        raise InvalidArgumentError(
            "Coefficients must be a tuple of exactly 3 values")
    triple = [_number(c, f"ns_coefficients[{i}]")
              for i, c in enumerate(coefficients)]
    _core.check_ns_coefficients([triple], int(steps),
                                ns_dtype or "f32")
    if not 0.0 < _number(group["eps"], "eps"):
        raise InvalidArgumentError(
            f"invalid argument: eps {group['eps']!r} is not a number > 0 "
            "(Newton-Schulz divides by max(norm, eps): with 0 a zero update "
            "is 0 / 0)")


def check_muon_group(group, ns_dtype=None):
    """Every check of a Muon group's settings: at construction, in
    add_param_group, in load_state_dict and before each step (a scheduler
    or the user may have changed them)."""
    check_lr(group["lr"])
    check_muon_numbers(group["momentum"], group["weight_decay"])
    check_adjust(group["adjust_lr_fn"])
    check_decay_mode(group["weight_decay_mode"])
    check_normuon(group["normuon"], group["normuon_beta2"])
    check_ns(group, ns_dtype)
    check_decay_product(group)
    for x in SETTINGS:
        if x["algorithm"] != "muon" or torch_key(x) not in group:
            continue
        if x["kind"] == "number" and torch_key(x) not in (
                "lr", "momentum", "weight_decay", "normuon_beta2"):
            _check_table_number(x, group[torch_key(x)])
        elif x["kind"] == "flag":
            _check_flag(torch_key(x), group[torch_key(x)])


def check_element_group(group):
    """The checks of an element-wise group (AdamW, Lion, ...): every number
    of the runtime's table finite and >= 0, betas below 1 (torch's
    AdamW's checks)."""
    check_lr(group["lr"])
    for x in SETTINGS:
        if x["algorithm"] != group["algorithm"] or x["json_key"] == "lr" or \
                x["json_key"] not in group:
            continue
        value = group[x["json_key"]]
        if x["kind"] == "number":
            _check_table_number(x, value)
        elif x["kind"] == "flag":
            _check_flag(x["json_key"], value)
        elif value not in x["names"]:
            raise InvalidArgumentError(
                f"invalid argument: {x['json_key']} {value!r} is not one of "
                + ", ".join(repr(n) for n in x["names"]))
    check_decay_product(group)


def _check_flag(key, value):
    """A flag (nesterov, ...): True or False, as torch takes it."""
    if not isinstance(value, bool) and not (
            isinstance(value, numbers.Integral) and value in (0, 1)):
        raise MuonTypeError(f"invalid argument: {key} {value!r} is not True "
                            "or False")


def _check_table_number(setting, value):
    """A number of the runtime's settings table (a shared key, "betas", a
    sequence of them): finite, >= 0, betas below 1."""
    key = setting["json_key"]
    shared = sum(1 for x in SETTINGS if x["json_key"] == key and
                 x["algorithm"] == setting["algorithm"])
    if shared == 1:
        values = [value]
    elif not isinstance(value, (tuple, list)) or len(value) != shared:
        raise InvalidArgumentError(f"invalid argument: {key} {value!r} is "
                                   f"not a sequence of {shared} numbers")
    else:
        values = value
    for i, v in enumerate(values):
        what = key if len(values) == 1 else f"{key}[{i}]"
        number = _number(v, what)
        if key == "extra_scale_factor" and number > MAX_STEP_RATE:
            raise InvalidArgumentError(
                f"invalid argument: {what} {v!r} is beyond "
                f"{MAX_STEP_RATE:g}: a step would move the parameters past "
                "what float32 holds")
        if number < 0.0 or (key == "betas" and number >= 1.0) or (
                key == "eps" and number == 0.0):
            bound = {"betas": "in [0, 1)", "eps": "> 0 (with 0 a zero "
                     "gradient's update is 0 / 0)"}.get(key, ">= 0")
            raise InvalidArgumentError(
                f"invalid argument: {what} {v!r} is not a number {bound}")


def heads_by_name(params):
    """{name: (num_heads, head_split_dim)} of every parameter that asks for
    per-head Newton-Schulz through its group's num_heads / head_split_dim
    (an int for the whole group, or a dict by parameter name). `params`:
    (parameter, name, group) triples. Whether the heads divide the dim the
    compiler checks, naming the parameter."""
    out = {}
    by_group = {}
    for _, name, group in params:
        by_group.setdefault(id(group), (group, []))[1].append(name)
    every = {name for _, name, _ in params}
    for group, names in by_group.values():
        if group["algorithm"] != "muon":
            continue  # add_param_group refused the keys on AdamW groups
        given = {k: group.get(k) for k in HEAD_KEYS}
        for key, value in given.items():
            # A dict may be the constructor's, shared by every group: its
            # names must be the optimizer's (a typo must not pass).
            if isinstance(value, dict):
                strangers = sorted(set(value) - every)
                if strangers:
                    raise InvalidArgumentError(
                        f"invalid argument: {key} names '{strangers[0]}', "
                        "which is not a parameter of the optimizer (names "
                        "as in param_names, e.g. " +
                        ", ".join(f"'{n}'" for n in sorted(every)[:3]) + ")")
        for name in names:
            heads, dim = (v.get(name) if isinstance(v, dict) else v
                          for v in given.values())
            heads = 1 if heads is None else heads
            dim = 0 if dim is None else dim
            # Integers of any kind (numpy's too), not bools.
            integral = [isinstance(v, numbers.Integral) and
                        not isinstance(v, bool) for v in (heads, dim)]
            if not integral[0] or heads < 1:
                raise InvalidArgumentError(
                    f"invalid argument: parameter '{name}': num_heads "
                    f"{heads!r} is not an integer >= 1")
            if not integral[1] or dim not in (0, 1):
                raise InvalidArgumentError(
                    f"invalid argument: parameter '{name}': head_split_dim "
                    f"{dim!r} is not 0 (rows) or 1 (columns)")
            if heads != 1 or dim != 0:
                out[name] = (int(heads), int(dim))
    return out
