"""Lifetimes and reloads: what host code and Python keep (function handles in statics, array
views, functions of the host-code node) stays valid when the tree is dropped and the library
loaded again."""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from conftest import VADD_C, build_c_program, consts, run, run_python

import modpack

COUNTING_HOST = r"""
#include "modpack/backend.h"
/* The handle is kept in a static, as backend.h allows, across reloads of the library. */
static int64_t run(int64_t x) {
  static void* count;
  mp_value_t ret;
  if (!count && mp_backend_get_function("blobby_count", &count) != MP_OK) return -1;
  mp_value_t args[1] = {mp_int(x)};
  if (mp_backend_call(count, args, 1, &ret) != MP_OK) return -2;
  return ret.v_int64;
}
MP_EXPORT_FUNC(run, int64_t, int64_t)
"""


class Counter(modpack.BinaryModule):
    type_key = "test.counter"

    def save_to_binary(self) -> bytes:
        return b"c"

    def get_function(self, name, query_imports=False):
        if name == "blobby_count":
            return lambda x: x * 10
        raise KeyError(name)


@pytest.fixture(scope="module", autouse=True)
def counter_loader():
    modpack.register_loader("test.counter")(lambda payload: Counter())
    yield
    modpack.unregister_loader("test.counter")


def test_host_function_handles_survive_reloads(tmp_path):
    host = modpack.csource_module(COUNTING_HOST)
    host.import_module(Counter())
    host.import_module(modpack.const_module({"w": np.arange(4.0)}))
    path = host.export_library(tmp_path / "stale.so")
    lib1 = modpack.load_module(path)
    assert lib1["run"](2) == 20
    weights = lib1.imported_modules[1].arrays["w"]  # keeps the library mapped
    del lib1
    gc.collect()
    lib2 = modpack.load_module(path)  # a new tree over the same mapping
    assert lib2["run"](3) == 30  # the static handle is resolved against the new tree
    assert weights.sum() == 6.0


def test_a_reused_library_node_keeps_its_imports(tmp_path):
    root = consts(1)
    host = modpack.csource_module(VADD_C)
    root.import_module(host)
    host.import_module(consts(2))
    path = root.export_library(tmp_path / "reuse.so")
    counts = []
    for _ in range(4):
        tree = modpack.load_module(path)
        node = tree.imported_modules[0]
        counts.append(len(node.imported_modules))
        keep = node["add_int"]  # keeps the library node alive across the reload
        del tree, node
        gc.collect()
    assert counts == [1, 1, 1, 1]
    assert keep(1, 1) == 2


def mapped(path) -> bool:
    """Whether the file at |path| is mapped into this process."""
    return os.path.realpath(path) in Path("/proc/self/maps").read_text()


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture
def weights_library(tmp_path):
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(4096, dtype=np.float32)}))
    return host.export_library(tmp_path / "weights.so")


def test_a_dropped_library_is_unmapped_once_its_views_functions_and_capsules_go(
        weights_library):
    root = modpack.load_module(weights_library)
    arrays = root.imported_modules[0].arrays
    w = arrays["w"]
    function = root["add_int"]
    consumer = np.from_dlpack(w)  # a DLPack capsule's consumer keeps the view's base
    assert mapped(weights_library) and function(2, 3) == 5

    del root, arrays, function
    gc.collect()
    assert mapped(weights_library)  # the view and its DLPack consumer still hold it
    assert float(consumer[4095]) == 4095.0
    del w
    gc.collect()
    assert mapped(weights_library)
    del consumer
    gc.collect()
    assert not mapped(weights_library), "the library stayed mapped after everything was dropped"


# Under AddressSanitizer (the sanitizer run preloads it), freed memory waits in its quarantine
# (256 MB by default) before reuse, so RSS grows with every byte a cycle frees: it would
# measure the quarantine, not the runtime. The plain run measures RSS; the sanitizer run the
# rest (what is mapped, use after free).
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")
rss_is_meaningful = pytest.mark.skipif(
    UNDER_ASAN, reason="RSS under AddressSanitizer measures its quarantine of freed memory")


def cycles(path, count: int) -> tuple[int, int]:
    """RSS (KiB) after a warm-up, and after |count| cycles of load, read .arrays, drop."""
    def cycle() -> None:
        root = modpack.load_module(path)
        assert root.imported_modules[0].arrays["w"][7] == 7.0

    for _ in range(50):
        cycle()
    gc.collect()
    before = rss_kib()
    for _ in range(count):
        cycle()
    gc.collect()
    return before, rss_kib()


@rss_is_meaningful
def test_load_read_drop_cycles_keep_memory_flat(weights_library):
    before, after = cycles(weights_library, 1000)
    assert not mapped(weights_library)
    assert after - before < 2048, f"RSS grew by {after - before} KiB over 1,000 cycles"


@pytest.mark.slow
@rss_is_meaningful
def test_ten_thousand_load_read_drop_cycles_keep_memory_flat(weights_library):
    before, after = cycles(weights_library, 10_000)
    assert not mapped(weights_library)
    assert after - before < 4096, f"RSS grew by {after - before} KiB over 10,000 cycles"


def export_value(path, value: float):
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"v": np.full(4, value, dtype=np.float32)}))
    return host.export_library(path)


def test_a_re_exported_file_loads_anew_and_the_old_tree_stays_valid(tmp_path):
    path = export_value(tmp_path / "r.so", 4.0)
    old = modpack.load_module(path)
    old_v = old.imported_modules[0].arrays["v"]
    assert modpack.load_module(path) is old  # the same file: the live tree
    export_value(path, 8.0)  # a new file renamed over the old one
    new = modpack.load_module(path)
    assert new is not old
    assert new.imported_modules[0].arrays["v"].tolist() == [8.0] * 4
    assert old_v.tolist() == [4.0] * 4 and old["add_int"](1, 2) == 3
    assert modpack.load_module(path) is new
    del old, old_v
    gc.collect()
    assert modpack.load_module(path) is new


REWRITE_IN_PLACE = r"""
import os, shutil, sys, modpack
path, other = sys.argv[1], sys.argv[2]
old = modpack.load_module(path)
shutil.copyfile(other, path)  # same inode, new bytes, as `cp` does
try:
    modpack.load_module(path)
    print("loaded")
except modpack.ModpackError as e:
    print(e)
sys.stdout.flush()
# The old mapping now shows the rewritten file: unloading it, or running its code, is unsafe
# (the classic crash of `cp` over a loaded library), so this process ends without either.
os._exit(0)
"""


def test_a_file_rewritten_in_place_under_a_loaded_version_is_refused(tmp_path):
    path = export_value(tmp_path / "p.so", 4.0)
    other = export_value(tmp_path / "q.so", 8.0)
    out = run_python(REWRITE_IN_PLACE, str(path), str(other))
    assert "rewritten in place" in out and "renaming it over the old" in out
    assert modpack.load_module(path).imported_modules[0].arrays["v"][0] == 8.0


@pytest.mark.parametrize("name", ["fifo.so", "fifo.tar"])
def test_a_fifo_is_refused_without_blocking(tmp_path, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    with pytest.raises(modpack.ModpackError, match="not a regular file"):
        modpack.load_module(fifo)


def test_the_runtime_refuses_special_files_without_blocking(tmp_path):
    from modpack.runtime.binding import error_from_status, ffi, lib

    fifo = tmp_path / "pipe.so"
    os.mkfifo(fifo)
    out = ffi.new("mp_module_t**")
    error = error_from_status(lib.mp_module_load_from_file(os.fsencode(fifo), 0, out))
    assert "FIFO" in str(error) and "not a library file" in str(error)
    error = error_from_status(lib.mp_module_load_from_file(os.fsencode(tmp_path), 0, out))
    assert "a directory" in str(error)


def test_a_file_the_program_dlopened_itself_does_not_shadow_the_next_load(tmp_path):
    """glibc knows an object by every name it was opened by. When the program holds a library
    itself (ctypes here), modpack's load of it adds "/proc/self/fd/N" to its names; after the
    drop, the next file must not get descriptor N and, by that name, the first file's code.
    Two files of one layout: the wrong code would load without any error."""
    paths = []
    for value in (1.0, 2.0):
        host = modpack.csource_module(VADD_C)
        host.import_module(modpack.const_module({"w": np.full(64, value, np.float32)}))
        paths.append(host.export_library(tmp_path / f"v{int(value)}.so"))
    assert paths[0].stat().st_size == paths[1].stat().st_size
    out = run_python(
        "import ctypes, gc, sys, modpack\n"
        "held = ctypes.CDLL(sys.argv[1])\n"
        "first = modpack.load_module(sys.argv[1])\n"
        "print(float(first.imported_modules[0].arrays['w'][0]))\n"
        "del first; gc.collect()\n"
        "second = modpack.load_module(sys.argv[2])\n"
        "print(float(second.imported_modules[0].arrays['w'][0]))\n",
        str(paths[0]), str(paths[1]))
    assert out.split() == ["1.0", "2.0"]


SWAP_PROGRAM = r"""
#include <stdio.h>
#include "modpack/modpack.h"

static long long version(mp_module_t* root) {
  mp_function_t* f;
  mp_value_t one = mp_int(1), ret;
  if (mp_module_get_function(root, "version", 0, &f) != MP_OK) return -1;
  mp_status_t status = mp_function_call(f, &one, 1, &ret);
  mp_function_release(f);
  return status == MP_OK ? (long long)ret.v_int64 : -2;
}

/* argv[1]: a library, argv[2]: its next version, renamed over it while the first is loaded. */
int main(int argc, char** argv) {
  mp_module_t *first, *second;
  if (argc != 3 || mp_module_load_from_file(argv[1], 0, &first) != MP_OK) {
    printf("first load: %s\n", mp_error_message());
    return 2;
  }
  printf("first: %lld\n", version(first));
  if (rename(argv[2], argv[1]) != 0) return 3;
  if (mp_module_load_from_file(argv[1], 0, &second) != MP_OK) {
    printf("second load: %s\n", mp_error_message());
  } else {
    printf("second: %lld\n", version(second));
    mp_module_release(second);
  }
  printf("first again: %lld\n", version(first));
  mp_module_release(first);
  return 0;
}
"""


def _versions(folder: Path) -> tuple[Path, Path]:
    made = []
    for v in (1, 2):
        host = modpack.csource_module(
            '#include "modpack/backend.h"\n'
            f"static int64_t version(int64_t x) {{ return x + {100 * v}; }}\n"
            "MP_EXPORT_FUNC(version, int64_t, int64_t)\n")
        made.append(host.export_library(folder / f"v{v}.so"))
    return made[0], made[1]


def test_without_proc_a_load_goes_by_path_and_a_new_version_is_refused(runtime_prefix,
                                                                        tmp_path):
    """modpack dlopens the file it checked by its /proc/self/fd name. Where /proc is not
    mounted (some containers), a load falls back to the path; the dynamic loader then returns
    an object already loaded under that path without looking at the file, so loading a new
    version while the old one is loaded is refused, saying so, rather than wiring the old code
    to the new file's tree. With /proc, both versions load side by side."""
    unshare = shutil.which("unshare")
    # The shell and tools run without /proc: no preloaded sanitizer runtime (the sanitizer
    # run of this file preloads one, which cannot work without /proc), as a plain process.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD" and "SAN_OPTIONS" not in k}
    probe = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c",
                            "umount -l /proc && test ! -e /proc/self"],
                           capture_output=True, env=env) if unshare else None
    if probe is None or probe.returncode != 0:
        pytest.skip("hiding /proc needs a private mount namespace in which it can be unmounted "
                    "(unshare --mount, as root)")
    exe = build_c_program(runtime_prefix, SWAP_PROGRAM, tmp_path / "swap")
    v1, v2 = _versions(tmp_path)
    library, next_version = tmp_path / "lib.so", tmp_path / "next.so"

    def swap(hide_proc: bool) -> list[str]:
        shutil.copyfile(v1, library)
        shutil.copyfile(v2, next_version)
        command = f"{exe} {library} {next_version}"
        if hide_proc:
            command = f"umount -l /proc && test ! -e /proc/self && {command}"
        return run(unshare, "--mount", "--propagation", "private", "sh", "-c", command,
                   env=env).splitlines()

    assert swap(hide_proc=False) == ["first: 101", "second: 201", "first again: 101"]
    first, refused, again = swap(hide_proc=True)
    assert (first, again) == ("first: 101", "first again: 101")
    assert refused.startswith("second load: cannot load the new version of "), refused
    assert "is /proc mounted?" in refused and "drop every module of the old version" in refused
