# -*- Python -*-
import os

import lit.formats
from lit.llvm import llvm_config

config.name = "MUON"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.muon_obj_root, "test")
config.excludes = ["Inputs", "Utils", "spec", "ir", "plan", "CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py"]

config.substitutions.append(("%muon_obj_root", config.muon_obj_root))
config.substitutions.append(("%muon_src_root", config.muon_src_root))
config.substitutions.append(("%examples", os.path.join(config.muon_src_root, "examples")))
config.substitutions.append(("%spec_docs", os.path.join(config.muon_src_root, "test", "Target", "Spec", "Inputs")))

# ../shared/models is beside the checkout on developer and CI machines but not
# for users: tests over it run only where it exists.
shared_models = os.path.join(config.muon_src_root, "..", "shared", "models")
if os.path.isdir(shared_models):
    config.available_features.add("shared-models")
    config.substitutions.append(("%shared_models", os.path.abspath(shared_models)))

# DNNL_MAX_CPU_ISA (oneDNN's own setting) passes through, so that the suite
# can run as on a CPU without bf16 products: DNNL_MAX_CPU_ISA=AVX512_CORE.
llvm_config.with_system_environment(["HOME", "TMP", "TEMP", "DNNL_MAX_CPU_ISA"])
llvm_config.use_default_substitutions()
llvm_config.add_tool_substitutions(["split-file", "not", "count", "FileCheck"], [config.llvm_tools_dir])
tool_dirs = [config.muon_tools_dir, config.llvm_tools_dir]
llvm_config.add_tool_substitutions(["muon-opt", "muon-translate", "muon-run", "muon-bench", "muon-capi-test", "muon-capi-lion-test", "muon-train-example"], tool_dirs)
config.substitutions.append(("expect-exit", os.path.join(config.test_source_root, "Utils", "expect-exit")))
# mpirun as the tests start it: root in containers, more ranks than cores,
# and a private session directory per test (concurrent mpiruns sharing one
# race when one of them cleans it up).
config.substitutions.append(("%mpirun", "timeout 300 mpirun -q --allow-run-as-root --oversubscribe --bind-to none --mca btl_vader_single_copy_mechanism none --mca orte_tmpdir_base $(mkdir -p %t.mpi && echo %t.mpi)"))
config.substitutions.append(("compare-losses", "python3 " + os.path.join(config.test_source_root, "Utils", "compare-losses.py")))
config.substitutions.append(("replay-inputs", "python3 " + os.path.join(config.test_source_root, "Utils", "replay-inputs.py")))
config.substitutions.append(("edit-bytes", "python3 " + os.path.join(config.test_source_root, "Utils", "edit-bytes.py")))
config.substitutions.append(("edit-json", "python3 " + os.path.join(config.test_source_root, "Utils", "edit-json.py")))
config.substitutions.append(("check-trace", "python3 " + os.path.join(config.test_source_root, "Utils", "check-trace.py")))
config.substitutions.append(("check-report", "python3 " + os.path.join(config.test_source_root, "Utils", "check-report.py")))
config.substitutions.append(("check-heads", "python3 " + os.path.join(config.test_source_root, "Utils", "check-heads.py")))

# The CUDA backend's self-check (runtime/backends/cuda): `cuda-backend` where
# it is built, `cuda-gpu` where it also finds a usable GPU.
cuda_check = os.path.join(config.muon_tools_dir, "muon-cuda-check")
if os.access(cuda_check, os.X_OK):
    import subprocess

    config.available_features.add("cuda-backend")
    llvm_config.add_tool_substitutions(["muon-cuda-check"], [config.muon_tools_dir])
    try:
        probe = subprocess.run([cuda_check, "--probe"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=120)
        if probe.returncode == 0:
            config.available_features.add("cuda-gpu")
    except (OSError, subprocess.TimeoutExpired):
        pass

# The CUDA backend on the host stand-in for a GPU (unittests/FakeGpu):
# `fake-gpu` where muon-run-fakegpu and muon-cuda-check-fakegpu are built.
fake_tools = ["muon-run-fakegpu", "muon-cuda-check-fakegpu"]
if all(os.access(os.path.join(config.muon_tools_dir, t), os.X_OK) for t in fake_tools):
    config.available_features.add("fake-gpu")
    llvm_config.add_tool_substitutions(fake_tools, [config.muon_tools_dir])

# The CPU backend's bf16 products (oneDNN on AVX512_BF16 or AMX): where the
# build has them and this CPU has the instructions, `cpu-bf16`, and
# %cpu_bf16_kernel is "onednn" (else "blas": bf16 rounds f32 products).
import json
import subprocess


def bench_ns_json(ns_dtype):
    """The last JSON line of a tiny `muon-bench ns` run, or None."""
    try:
        probe = subprocess.run(
            [os.path.join(config.muon_tools_dir, "muon-bench"), "ns",
             "--shapes", "2x2", "--repeats", "1", "--ns-dtype", ns_dtype,
             "--json"],
            capture_output=True, text=True, timeout=120)
        if probe.returncode != 0:
            return None
        return json.loads(probe.stdout.splitlines()[-1])
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        return None


bf16 = bench_ns_json("bf16")
cpu_bf16_kernel = "blas"
if bf16 and bf16.get("products", "").startswith("bf16 products"):
    cpu_bf16_kernel = "onednn"
    config.available_features.add("cpu-bf16")
config.substitutions.append(("%cpu_bf16_kernel", cpu_bf16_kernel))

# ns_dtype "auto" on the CPU (NsPrecision.h): bf16 where its products run at
# least 1.3x sgemm's rate, timed once per process. Timed once here and
# handed to every test (MUON_CPU_PRODUCT_RATES), so that every process of
# the suite chooses alike, as muon-run's ranks take their launcher's;
# %cpu_auto_ns is the choice ("bf16" or "f32"). ns-dtype-auto.test checks
# the rule on given rates and lets a run time its own.
auto = bench_ns_json("auto")
cpu_auto_ns = auto["ns_dtype"] if auto else "f32"
if auto and auto.get("product_rates"):
    config.environment["MUON_CPU_PRODUCT_RATES"] = auto["product_rates"]
config.substitutions.append(("%cpu_auto_ns", cpu_auto_ns))
