"""The Python blocks of the docs, checked in an interpreter that has muonc
and torch (check-doc-blocks.py runs it; stdin: a JSON list of blocks, each
{"where", "text", "words"}; the last line of stdout: a JSON list of each
block's errors).

Every block is compiled, and what it takes from muonc is checked against
the package as it is: the modules and names it imports, every attribute it
reads of them or of the objects their calls make (`opt = Muon(...)`, then
`opt.step`), and the keyword arguments of those calls. So a renamed
function, method or argument fails, without running the block. Blocks
marked `run` are also run, after the setup they name (`setup=NAME`:
test/docs/setups.py's NAME(), whose names the block may use)."""
import ast
import contextlib
import importlib
import inspect
import io
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))


class Made:
    """An object a call to `factory` makes (its class, where known)."""

    def __init__(self, cls):
        self.cls = cls


def module_or_none(name):
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def resolve(node, env):
    """The object an expression names (a module, class, function, a Made
    instance), or None where it is not muonc's."""
    if isinstance(node, ast.Name):
        return env.get(node.id)
    if isinstance(node, ast.Attribute):
        base = resolve(node.value, env)
        if base is None:
            return None
        return attribute(base, node.attr)
    if isinstance(node, ast.Call):
        made = resolve(node.func, env)
        return made_by(made)
    return None


def attribute(base, name):
    if isinstance(base, Made):
        if base.cls is None:
            return None
        value = inspect.getattr_static(base.cls, name, Missing)
        if value is Missing and name in instance_attributes(base.cls):
            return None  # set in __init__ (param_groups, state, ...)
        if value is Missing:
            raise LookupError(f"{base.cls.__name__} has no attribute "
                              f"'{name}'")
        return value.__func__ if isinstance(value, (classmethod,
                                                    staticmethod)) else value
    value = getattr(base, name, Missing)
    if value is Missing and inspect.ismodule(base):
        value = module_or_none(f"{base.__name__}.{name}") or Missing
    if value is Missing:
        raise LookupError(f"{getattr(base, '__name__', base)} has no "
                          f"attribute '{name}'")
    return value


class Missing:
    pass


def instance_attributes(cls, cache={}):
    """The attributes an instance of a muonc class has beside its class's
    (torch.optim.Optimizer's param_groups, state, defaults, ...): those of a
    small real instance."""
    if cls not in cache:
        names = set()
        try:
            import torch
            if issubclass(cls, torch.optim.Optimizer):
                w = torch.nn.Parameter(torch.zeros(2, 2))
                names = set(vars(cls([w])))
        except Exception:  # noqa: BLE001 (no instance: no extra names)
            pass
        cache[cls] = names
    return cache[cls]


def made_by(factory):
    """What calling `factory` makes, where it is muonc's: an instance of a
    class, or of the class a known factory returns."""
    if factory is None:
        return None
    if inspect.isclass(factory):
        return Made(factory)
    name = getattr(factory, "__qualname__", "")
    if name.endswith("for_model"):  # Muon.for_model
        from muonc.torch import Muon
        return Made(Muon)
    return Made(None)


def keyword_names(factory):
    """The keyword arguments a muonc callable takes, or None for any."""
    target = factory.__init__ if inspect.isclass(factory) else factory
    try:
        sig = inspect.signature(target)
    except (TypeError, ValueError):
        return None
    names = {p.name for p in sig.parameters.values()
             if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    if any(p.kind == p.VAR_KEYWORD for p in sig.parameters.values()):
        extra = muon_keywords(factory)
        if extra is None:
            return None
        names |= extra
    return names


def muon_keywords(factory):
    """What muonc's optimizer takes by **keyword: the settings table's Muon
    settings, and for_model's split keywords besides Muon's own."""
    from muonc.torch import Muon
    from muonc.torch import _grouping, _settings
    qual = getattr(factory, "__qualname__", "")
    if factory is Muon or qual.startswith("Muon."):
        table = {_settings.torch_key(x) for x in _settings.SETTINGS
                 if x["algorithm"] == "muon"}
        own = set(inspect.signature(Muon.__init__).parameters)
        return table | own | (set(_grouping.SPLIT_KEYS)
                              if qual.endswith("for_model") else set())
    if qual.startswith("MuonFactory"):
        return None
    return None


def check_static(text, where):
    tree = ast.parse(text, where)
    compile(tree, where, "exec")
    env, errors = {}, []
    for node in ast.walk(tree):
        try:
            bind_imports(node, env)
        except LookupError as e:
            errors.append(str(e))
    # Assignments in order: names bound to what muonc calls make.
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            try:
                value = resolve(node.value, env)
            except LookupError:
                value = None
            for target in node.targets:
                if isinstance(target, ast.Name) and value is not None:
                    env[target.id] = value
    for node in ast.walk(tree):
        try:
            if isinstance(node, ast.Attribute):
                resolve(node, env)
            elif isinstance(node, ast.Call):
                check_keywords(node, env)
        except LookupError as e:
            if str(e) not in errors:
                errors.append(str(e))
    return errors


def bind_imports(node, env):
    if isinstance(node, ast.Import):
        for alias in node.names:
            if alias.name.split(".")[0] != "muonc":
                continue
            module = importlib.import_module(alias.name)
            if alias.asname:
                env[alias.asname] = module
            else:
                env["muonc"] = importlib.import_module("muonc")
    elif isinstance(node, ast.ImportFrom) and node.module and \
            node.module.split(".")[0] == "muonc":
        module = importlib.import_module(node.module)
        for alias in node.names:
            env[alias.asname or alias.name] = attribute(module, alias.name)


def check_keywords(call, env):
    factory = resolve(call.func, env)
    if factory is None or isinstance(factory, Made) or not callable(factory):
        return
    allowed = keyword_names(factory)
    if allowed is None:
        return
    for kw in call.keywords:
        if kw.arg is not None and kw.arg not in allowed:
            name = getattr(factory, "__qualname__", str(factory))
            raise LookupError(f"{name}() takes no keyword argument "
                              f"'{kw.arg}'")


def run_block(text, where, words):
    setup = next((w.split("=", 1)[1] for w in words
                  if w.startswith("setup=")), None)
    namespace = {"__name__": "__doc_block__"}
    if setup:
        sys.path.insert(0, HERE)
        import setups
        namespace.update(getattr(setups, setup)())
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(text, where, "exec"), namespace)


def source_of(text):
    """A block's code: an interpreter session's input lines (">>> ",
    "... ") where it shows one, else the block."""
    lines = text.splitlines()
    if not any(l.startswith(">>> ") for l in lines):
        return text
    return "\n".join(l[4:] for l in lines
                     if l.startswith((">>> ", "... "))) + "\n"


def main():
    blocks = json.load(sys.stdin)
    results = []
    for b in blocks:
        errors = []
        b["text"] = source_of(b["text"])
        try:
            errors += check_static(b["text"], b["where"])
            if not errors and "run" in b["words"]:
                run_block(b["text"], b["where"], b["words"])
        except SyntaxError as e:
            errors.append(f"does not compile: {e}")
        except Exception as e:  # noqa: BLE001 (the block's own failure)
            frames = [f for f in traceback.extract_tb(e.__traceback__)
                      if f.filename == b["where"]]
            at = f" (its line {frames[-1].lineno})" if frames else ""
            errors.append(f"fails when run{at}: {type(e).__name__}: {e}")
        results.append(errors)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
