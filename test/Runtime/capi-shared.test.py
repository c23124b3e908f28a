"""Loads libmuon_runtime.so with ctypes and runs two steps of a one-rank
plan through the C API (test/Runtime/capi-shared.test)."""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
lib.muon_runtime_version.restype = ctypes.c_char_p
lib.muon_last_error.restype = ctypes.c_char_p
print("version", lib.muon_runtime_version().decode())


class ParamInfo(ctypes.Structure):
    _fields_ = [("name", ctypes.c_char_p), ("dtype", ctypes.c_int),
                ("dims", ctypes.c_int64),
                ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("box_begin", ctypes.POINTER(ctypes.c_int64)),
                ("box_end", ctypes.POINTER(ctypes.c_int64)),
                ("elements", ctypes.c_int64), ("summand", ctypes.c_int64),
                ("group", ctypes.c_int64)]


def check(status):
    if status != 0:
        sys.exit("failed: " + lib.muon_last_error().decode())


opt = ctypes.c_void_p()
check(lib.muon_optimizer_create(sys.argv[2].encode(), None,
                                ctypes.byref(opt)))
lib.muon_optimizer_param_count.restype = ctypes.c_int64
lib.muon_optimizer_group_count.restype = ctypes.c_int64
lib.muon_optimizer_steps.restype = ctypes.c_int64
count = lib.muon_optimizer_param_count(opt)
storage = []
for i in range(count):
    info = ParamInfo()
    check(lib.muon_optimizer_param(opt, ctypes.c_int64(i), ctypes.byref(info)))
    values = (ctypes.c_float * info.elements)(*([1.0] * info.elements))
    grads = (ctypes.c_float * info.elements)(*([0.25] * info.elements))
    storage.append((values, grads))
    check(lib.muon_optimizer_bind(opt, info.name, values, grads, 0,
                                  ctypes.c_int64(info.elements)))
applied = ctypes.c_int()
for step in range(2):
    check(lib.muon_optimizer_set_group_setting(
        opt, b"muon", b"lr", ctypes.c_double(0.01 * (step + 1))))
    check(lib.muon_optimizer_step(opt, ctypes.byref(applied)))
changed = "changed" if storage[0][0][0] != 1.0 else "unchanged"
print(f"{count} params, {lib.muon_optimizer_group_count(opt)} groups, "
      f"{lib.muon_optimizer_steps(opt)} steps, first value {changed}")
lib.muon_optimizer_destroy(opt)
