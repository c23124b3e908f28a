#!/usr/bin/env python3
"""Checks every code block of README.md and docs/*.md, so that a removed or
renamed API breaks `make check`, not the reader.

    check-doc-blocks.py ROOT BUILD [--python PY] [--list]

A block's language (its fence's info string) says how it is checked; an
HTML comment on the line before the fence, `<!-- doc-block: WORD ... -->`,
says otherwise where needed:

  python   compiled, and every name it takes from muonc checked against
           the package (modules, classes, functions, methods of objects it
           makes, keyword arguments): test/docs/python_blocks.py in PY, the
           wheel's interpreter. `run` runs it (with `setup=NAME`, after
           test/docs/setups.py's NAME, which makes the model, data and
           helpers the text around the block speaks of).
  c++/cpp  compiled against the installed package (BUILD/install,
           find_package(Muon)), linked where it has a main; `run` runs
           it (on one rank) with a plan of examples/single-device.json as
           its argument. A fragment (no #include, no main) is compiled as
           a function's body after test/docs/cpp_context.h, which declares
           the trainer's names the text speaks of; `continues` appends it
           to the file's previous C++ block (same function).
  sh       bash -n; each muon-* tool's flags in its --help; make's targets
           in the Makefile; the scripts and files it runs exist.
  mlir     parsed and verified by muon-opt; `continues` adds its ops to
           the model of the file's previous complete mlir block (the
           compiled ops of the model shown above); `fragment` (an op's
           syntax, naming symbols the text around it defines) is parsed
           inside a model without the verifier: its ops and their syntax
           must be muon-opt's; `invalid` must be refused.
  json     parsed; `fragment`: members of an object or elements of a list
           (a spec's lines); `spec` imported by muon-translate
           --import-spec.
  cmake    configured against the installed package (lines of a
           consumer's CMakeLists.txt: in a project with an executable
           `trainer` where the block has no project() of its own).
  text     not code (output, a table, grammar): not checked.

An unlabelled block is an error: label it. Exit 0 when every block passes;
the last line is "N blocks checked, N failed".
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FENCE = re.compile(r"^(\s*)```(.*)$")
NOTE = re.compile(r"^\s*<!--\s*doc-block:\s*(.*?)\s*-->\s*$")
LANGUAGES = {"python", "c++", "cpp", "sh", "mlir", "json", "cmake", "text"}


class Block:
    def __init__(self, path, line, language, note, text):
        self.path, self.line = path, line
        self.language = "c++" if language == "cpp" else language
        self.words = note.split()
        self.text = text

    @property
    def where(self):
        return f"{self.path}:{self.line}"

    def option(self, key):
        for w in self.words:
            if w.startswith(key + "="):
                return w.split("=", 1)[1]
        return None


def blocks_of(root):
    """Every fenced block of README.md and docs/*.md, in order."""
    paths = ["README.md"] + sorted(
        os.path.join("docs", f) for f in os.listdir(os.path.join(root, "docs"))
        if f.endswith(".md"))
    out = []
    for rel in paths:
        lines = open(os.path.join(root, rel), encoding="utf-8").read() \
            .splitlines()
        i = 0
        while i < len(lines):
            m = FENCE.match(lines[i])
            if not m:
                i += 1
                continue
            indent, info = len(m.group(1)), m.group(2).strip()
            note = ""
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            if j >= 0 and NOTE.match(lines[j]):
                note = NOTE.match(lines[j]).group(1)
            body, k = [], i + 1
            while k < len(lines) and not FENCE.match(lines[k]):
                body.append(lines[k][indent:] if lines[k][:indent].strip() == ""
                            else lines[k])
                k += 1
            out.append(Block(rel, i + 1, info.split()[0] if info else "",
                             note, "\n".join(body) + "\n"))
            i = k + 1
    return out


# --- sh ------------------------------------------------------------------------

def tool_flags(build, tool, cache={}):
    """The flags a tool's --help names (and its subcommands')."""
    if tool not in cache:
        path = os.path.join(build, "bin", tool)
        text = ""
        if os.path.exists(path):
            for args in ([], ["ns"], ["step"], ["plan-load"]):
                done = subprocess.run([path] + args + ["--help"],
                                      capture_output=True, text=True,
                                      timeout=60)
                text += done.stdout + done.stderr
        cache[tool] = (os.path.exists(path),
                       set(re.findall(r"--[a-z][a-z0-9-]*", text)))
    return cache[tool]


def make_targets(root, cache={}):
    if "targets" not in cache:
        text = open(os.path.join(root, "Makefile")).read()
        cache["targets"] = set(re.findall(r"^([a-z][a-z0-9-]*):", text,
                                          re.M))
    return cache["targets"]


def commands(text):
    """The shell words of each command line (continuations joined, comments
    and prompts dropped)."""
    joined = re.sub(r"\\\n", " ", text)
    for line in joined.splitlines():
        line = line.split(" #")[0].strip()
        if not line or line.startswith("#"):
            continue
        line = re.sub(r"^\$ ", "", line)
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part)
            except ValueError:
                continue
            while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
                words = words[1:]  # VAR=value before the command
            if words and words[0] in ("env", "timeout", "time", "sudo"):
                words = [w for w in words[1:]
                         if not re.match(r"^([A-Z_][A-Z0-9_]*=|[0-9]+$)", w)]
            if words:
                yield words


def check_sh(block, root, build):
    errors = []
    done = subprocess.run(["bash", "-n"], input=block.text, text=True,
                          capture_output=True)
    if done.returncode:
        errors.append(f"bash -n: {done.stderr.strip()}")
    for words in commands(block.text):
        tool = os.path.basename(words[0])
        if tool.startswith("muon-"):
            exists, flags = tool_flags(build, tool)
            if not exists:
                errors.append(f"no tool {tool} in {build}/bin")
                continue
            for w in words[1:]:
                flag = w.split("=")[0]
                if flag.startswith("--") and flag not in flags:
                    errors.append(f"{tool} has no {flag} (its --help)")
        elif tool == "make":
            for w in words[1:]:
                if "=" not in w and not w.startswith("-") and \
                        w not in make_targets(root):
                    errors.append(f"the Makefile has no target {w}")
        elif tool in ("python3", "python", "bash", "sh") and len(words) > 1:
            script = next((w for w in words[1:] if not w.startswith("-")),
                          None)
            if script and "/" in script and not os.path.isabs(script) and \
                    not script.startswith(("build/", "$")) and \
                    not os.path.exists(os.path.join(root, script)):
                errors.append(f"{script} does not exist")
    return errors


# --- mlir, json, cmake, c++ ---------------------------------------------------------

WRAPPER = """muon.model @doc {{
  shard.grid @mesh(shape = 2x2) {{muon.axis_names = ["dp", "tp"]}}
{body}}}
"""


def run_tool(build, tool, args, text, suffix):
    with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([os.path.join(build, "bin", tool)] + args +
                              [f.name], capture_output=True, text=True,
                              timeout=120)
    finally:
        os.unlink(f.name)


def check_mlir(block, root, build, previous):
    text = block.text
    if "fragment" in block.words:
        text = WRAPPER.format(body="".join("  " + l + "\n"
                                           for l in text.splitlines()))
    elif "continues" in block.words:
        if previous is None:
            return ["'continues' with no mlir block before it in the file"]
        model = previous.rstrip()
        if not model.endswith("}"):
            return ["the block it continues does not end a model"]
        text = model[:-1] + "".join("  " + l.strip() + "\n"
                                    for l in text.splitlines()) + "}\n"
    unverified = ["--mlir-very-unsafe-disable-verifier-on-parsing"] \
        if "fragment" in block.words else []
    done = run_tool(build, "muon-opt", unverified, text, ".mlir")
    if "invalid" in block.words:
        return [] if done.returncode else ["muon-opt accepted an invalid "
                                           "example"]
    if done.returncode:
        return ["muon-opt: " + (done.stderr.strip().splitlines() or ["?"])[0]]
    return []


def parses(text):
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def check_json(block, root, build):
    text = block.text
    if "fragment" in block.words:
        # Members of an object, or elements of a list, as a spec shows them.
        body = text.strip().rstrip(",")
        text = next((t for t in ("{" + body + "}", "[" + body + "]")
                     if parses(t)), body)
    try:
        json.loads(text)
    except ValueError as e:
        return [f"not JSON: {e}"]
    if "spec" in block.words:
        done = run_tool(build, "muon-translate", ["--import-spec"], block.text,
                        ".json")
        if done.returncode:
            return ["muon-translate --import-spec: " +
                    (done.stderr.strip().splitlines() or ["?"])[0]]
    return []


def configure(source, build, binary):
    return subprocess.run(
        ["cmake", "-S", source, "-B", binary, "-G", "Ninja",
         f"-DCMAKE_PREFIX_PATH={os.path.join(build, 'install')}",
         "-DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir",
         "-DLLVM_DIR=/usr/lib/llvm-22/lib/cmake/llvm"],
        capture_output=True, text=True, timeout=600)


def check_cmake_blocks(blocks, build, work):
    """Each cmake block configured as a project's CMakeLists.txt (its
    sources: a main.cpp) against the installed package; {block: errors}."""
    errors = {}
    for n, b in enumerate(blocks):
        source = os.path.join(work, f"cmake{n}")
        os.makedirs(source, exist_ok=True)
        text = b.text
        if not re.search(r"^\s*project\(", text, re.M):
            # A consumer's lines: in a project with a target `trainer`.
            text = ("cmake_minimum_required(VERSION 3.20)\n"
                    "project(trainer CXX)\n"
                    "add_executable(trainer main.cpp)\n") + text
        with open(os.path.join(source, "CMakeLists.txt"), "w") as f:
            f.write(text)
        with open(os.path.join(source, "main.cpp"), "w") as f:
            f.write("int main() { return 0; }\n")
        done = configure(source, build, os.path.join(source, "out"))
        if done.returncode:
            errors[b] = ["cmake: " + tail(done.stdout + done.stderr)]
    return errors


def cpp_sources(blocks):
    """({block: its translation unit}, {continuation: its head}): a
    complete block as it is, a fragment inside a function after
    cpp_context.h; one that `continues` is appended to the file's previous
    block, its head, and checked with it."""
    sources, heads, previous = {}, {}, {}
    for b in blocks:
        complete = re.search(r"^\s*#include|\bint main\s*\(", b.text, re.M)
        if "continues" in b.words and b.path in previous and \
                "} // doc block\n" in sources[previous[b.path]]:
            head = heads[b] = previous[b.path]
            sources[head] = sources[head].replace(
                "} // doc block\n", b.text + "} // doc block\n")
            continue
        if complete:
            sources[b] = b.text
        else:
            compiler = ('#include "muon/Compiler/Compile.h"\n'
                        if "muon::compiler" in b.text else "")
            sources[b] = ('#include "cpp_context.h"\n' + compiler +
                          "void docBlock() {\n" + b.text +
                          "} // doc block\n")
        previous[b.path] = b
    return sources, heads


def check_cpp_blocks(blocks, root, build, work):
    """One CMake project over the installed package: each C++ block an
    object, linked into an executable where it has a main (and run where
    it says `run`); {block: errors}."""
    lines = ["cmake_minimum_required(VERSION 3.20)", "project(docblocks CXX)",
             "set(CMAKE_CXX_STANDARD 17)", "find_package(Muon REQUIRED)"]
    names = {}
    sources, heads = cpp_sources(blocks)
    for n, b in enumerate(blocks):
        if b in heads:
            continue
        name = f"block{n}"
        names[name] = b
        with open(os.path.join(work, name + ".cpp"), "w") as f:
            f.write(sources[b])
        program = re.search(r"\bint main\s*\(", sources[b])
        libs = "Muon::Runtime" + (" Muon::Compiler" if "muon/Compiler" in
                                  sources[b] else "")
        lines += [f"add_executable({name} {name}.cpp)" if program else
                  f"add_library({name} OBJECT {name}.cpp)",
                  f"target_include_directories({name} PRIVATE {HERE})",
                  f"target_link_libraries({name} PRIVATE {libs})"]
    if any("Muon::Compiler" in line for line in lines):
        lines[3] = "find_package(Muon REQUIRED COMPONENTS Compiler)"
    with open(os.path.join(work, "CMakeLists.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    out = os.path.join(work, "out")
    done = configure(work, build, out)
    if done.returncode:
        return {b: ["cmake: " + tail(done.stdout + done.stderr)]
                for b in blocks}
    errors = {}
    for name, b in names.items():
        built = subprocess.run(["cmake", "--build", out, "--target", name],
                               capture_output=True, text=True, timeout=600)
        if built.returncode:
            errors[b] = ["does not compile: " + tail(built.stdout)]
        elif "run" in b.words:
            failure = run_cpp_block(os.path.join(out, name), root, build,
                                    work)
            if failure:
                errors[b] = [failure]
    for b, head in heads.items():  # a continuation fails with its head
        if head in errors:
            errors[b] = [f"with {head.where}: " + e for e in errors[head]]
    return errors


def run_cpp_block(program, root, build, work):
    """Runs a C++ block's program with a plan of the 1-rank example as its
    argument; the failure, or None."""
    plan = os.path.join(work, "single-device.plan.json")
    if not os.path.exists(plan):
        done = subprocess.run(
            [os.path.join(build, "bin", "muon-run"),
             os.path.join(root, "examples", "single-device.json"),
             "--dry-run", "--plan", plan],
            capture_output=True, text=True, timeout=300)
        if done.returncode:
            return "muon-run could not compile its plan: " + tail(
                done.stdout + done.stderr)
    ran = subprocess.run([program, plan], capture_output=True, text=True,
                         timeout=300)
    if ran.returncode:
        return (f"runs and fails (exit {ran.returncode}): " +
                tail(ran.stdout + ran.stderr))
    return None


def tail(text, lines=6):
    kept = [l for l in text.splitlines() if "error" in l or "Error" in l]
    return " | ".join((kept or text.splitlines())[-lines:])


# --- python -------------------------------------------------------------------

def check_python(blocks, root, python):
    """Every python block through python_blocks.py in `python`;
    {block: errors}."""
    payload = [{"where": b.where, "text": b.text, "words": b.words}
               for b in blocks]
    done = subprocess.run([python, os.path.join(HERE, "python_blocks.py"),
                           root], input=json.dumps(payload), text=True,
                          capture_output=True, timeout=1800)
    if done.returncode:
        return {b: ["python_blocks.py failed: " + tail(done.stderr, 12)]
                for b in blocks}
    results = json.loads(done.stdout.strip().splitlines()[-1])
    return {b: r for b, r in zip(blocks, results) if r}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("root")
    p.add_argument("build")
    p.add_argument("--python", default=sys.executable,
                   help="the interpreter with muonc and torch (the wheel's)")
    p.add_argument("--list", action="store_true",
                   help="print each block's place and how it is checked")
    args = p.parse_args()
    root, build = os.path.abspath(args.root), os.path.abspath(args.build)
    blocks = blocks_of(root)
    failures = {}
    for b in blocks:
        if b.language not in LANGUAGES:
            failures[b] = [f"a block labelled '{b.language}': label it with "
                           "its language, or text"]
    checkers = {"sh": check_sh, "json": check_json}
    model = {}  # file -> its last mlir model's text, for `continues`
    for b in blocks:
        errs = []
        if b.language in checkers:
            errs = checkers[b.language](b, root, build)
        elif b.language == "mlir":
            errs = check_mlir(b, root, build, model.get(b.path))
            if not errs and "continues" not in b.words and \
                    "invalid" not in b.words and "fragment" not in b.words:
                model[b.path] = b.text
        if errs:
            failures[b] = errs
    with tempfile.TemporaryDirectory() as work:
        cmake = [b for b in blocks if b.language == "cmake"]
        failures.update(check_cmake_blocks(cmake, build, work))
        cpp = [b for b in blocks if b.language == "c++"]
        if cpp:
            os.makedirs(os.path.join(work, "cpp"))
            failures.update(check_cpp_blocks(cpp, root, build,
                                             os.path.join(work, "cpp")))
    python = [b for b in blocks if b.language == "python"]
    if python:
        failures.update(check_python(python, root, args.python))
    counts = {}
    for b in blocks:
        counts[b.language or "unlabelled"] = counts.get(
            b.language or "unlabelled", 0) + 1
        if args.list:
            print(f"{b.where}: {b.language} {' '.join(b.words)}")
    for b, errs in failures.items():
        for e in errs:
            print(f"{b.where}: {b.language} block: {e}")
    checked = sum(n for lang, n in counts.items() if lang != "text")
    print("doc blocks by language: " + ", ".join(
        f"{lang} {n}" for lang, n in sorted(counts.items())) +
        " (text is not code: not checked)")
    print(f"{checked} blocks checked, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
