"""What a signed load guarantees (docs/trust.md), each statement tested.

A signed load reads the file once: code, headers, the blob's index and device code go into a
private verified copy as they are hashed; the weights are hashed through a read-only mapping of
the file and stay mapped from it, shared between processes. So after the load a writer to the
file cannot change the code the process runs, and can change the weights it reads, unless the
load asked for a private copy of everything (``private_copy=True``)."""

from __future__ import annotations

import gc
import os
import signal
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from blobtools import blob_extent, layout, reseal
from conftest import ROOT, run
from racing import race
from test_signing import write_key

import modpack
from modpack.format.signatures import sign_library
from modpack.tools.inspection import inspect_library

HOST = r"""
#include "modpack/backend.h"
static double weight_at(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[i];
}
MP_EXPORT_FUNC(weight_at, double, int64_t)
static int64_t answer(void) { return 42; }
MP_EXPORT_FUNC0(answer, int64_t)
"""
WEIGHTS = np.arange(1 << 20, dtype=np.float32)  # 4 MiB: mapped from the file when signed


@pytest.fixture(scope="module")
def key(tmp_path_factory) -> tuple[Path, Path]:
    return write_key(tmp_path_factory.mktemp("key"), "signer")


@pytest.fixture
def signed(key, tmp_path) -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    path = host.export_library(tmp_path / "deploy.so")
    sign_library(path, key[0])
    return path


def weights_range(path: Path) -> tuple[int, int]:
    """The file offsets of the const array's data."""
    report = inspect_library(path)
    start = report["blob"]["file_offset"] + report["modules"][1]["offset"]
    size = report["modules"][1]["size"]
    return start + size - WEIGHTS.nbytes, start + size


def mappings_of(path: Path) -> list[str]:
    with open("/proc/self/maps") as maps:
        return [line for line in maps if line.rstrip().endswith(str(path))]


def rewrite_in_place(path: Path, begin: int, end: int, value: int) -> None:
    """Overwrite bytes [begin, end) of the file itself (same inode), as a writer with write
    access to it could."""
    with open(path, "r+b") as f:
        f.seek(begin)
        f.write(bytes([value]) * (end - begin))


def test_the_weights_stay_mapped_from_the_file(signed, key):
    shmem_before = _status("RssShmem")
    root = modpack.load_module(signed, trusted_keys=[key[1]])
    w = root.imported_modules[0].arrays["w"]
    assert np.array_equal(w, WEIGHTS) and root["weight_at"](12345) == 12345.0
    maps = mappings_of(signed)
    assert len(maps) == 1 and maps[0].split()[1] == "r--s", maps  # shared, read-only
    low, high = (int(x, 16) for x in maps[0].split()[0].split("-"))
    page = os.sysconf("SC_PAGESIZE")  # all of it but the partial pages at its ends
    assert 0 <= low - w.ctypes.data < page and 0 <= w.ctypes.data + w.nbytes - high < page
    assert _status("RssShmem") - shmem_before < 1024  # KiB: the copy holds the code only


def test_a_private_copy_holds_everything(signed, key):
    root = modpack.load_module(signed, trusted_keys=[key[1]], private_copy=True)
    assert np.array_equal(root.imported_modules[0].arrays["w"], WEIGHTS)
    assert mappings_of(signed) == []


def test_private_copy_is_for_signed_loads(signed):
    with pytest.raises(modpack.ArgumentError, match="give trusted_keys"):
        modpack.load_module(signed, private_copy=True)


@pytest.mark.parametrize("flag, keyword", [("MP_LOAD_PRIVATE_COPY", "private_copy"),
                                           ("MP_LOAD_VERIFY_ON_FIRST_USE", "verify_on_first_use")])
def test_the_flags_of_signed_loads_need_trusted_keys_in_c_too(signed, tmp_path, flag, keyword):
    """The C API ignored MP_LOAD_PRIVATE_COPY and MP_LOAD_VERIFY_ON_FIRST_USE without trusted
    keys where Python refused them: the runtime now refuses them at every entry point, with
    the message Python gives (Python passes its keywords through to that one rule)."""
    from modpack.runtime.binding import ffi, lib

    value = getattr(lib, flag)
    with pytest.raises(modpack.ArgumentError) as python:
        modpack.load_module(signed, **{keyword: True})
    message = str(python.value)
    assert message.startswith(f"{keyword}=True is for signed loads (C: {flag}): give "
                              "trusted_keys too")
    weights = modpack.save_weights({"w": WEIGHTS[:8]}, tmp_path / "w.mpw")
    options = ffi.new("mp_load_options_t*", {"struct_size": ffi.sizeof("mp_load_options_t"),
                                             "flags": value})
    out = ffi.new("mp_module_t**")
    path = str(signed).encode()
    calls = {
        "mp_module_load": lambda: lib.mp_module_load(path, options, out),
        "mp_module_load_from_file": lambda: lib.mp_module_load_from_file(path, value, out),
        "mp_module_load_from_memory": lambda: lib.mp_module_load_from_memory(
            ffi.from_buffer(signed.read_bytes()), signed.stat().st_size, value, out),
        "mp_weights_load": lambda: lib.mp_weights_load(str(weights).encode(), options, out),
        "mp_library_check_file": lambda: lib.mp_library_check_file(path, options, ffi.NULL),
    }
    for name, call in calls.items():
        assert call() == lib.MP_ERR_INVALID_ARGUMENT, name
        assert ffi.string(lib.mp_error_message()).decode() == message, name
        assert out[0] == ffi.NULL, name
    assert lib.mp_module_load(str(tmp_path / "absent.so").encode(), options, out) == \
        lib.MP_ERR_INVALID_ARGUMENT  # the options first, whatever the file


def test_a_writer_cannot_change_the_code_after_the_load(signed, key):
    """Everything but the weights is rewritten in place after the load: the loaded tree runs
    as verified; a new load refuses the file."""
    root = modpack.load_module(signed, trusted_keys=[key[1]])
    begin, end = weights_range(signed)
    page = os.sysconf("SC_PAGESIZE")
    rewrite_in_place(signed, 0, begin // page * page, 0xCC)
    rewrite_in_place(signed, -(-end // page) * page, signed.stat().st_size, 0xCC)
    assert root["answer"]() == 42 and root["weight_at"](7) == 7.0
    with pytest.raises(modpack.FormatError):
        modpack.load_module(signed, trusted_keys=[key[1]])


def test_a_writer_can_change_the_weights_unless_they_were_copied(signed, key):
    """The documented limit of the zero-copy load: weights are the file's pages."""
    shared = modpack.load_module(signed, trusted_keys=[key[1]])
    private = modpack.load_module(signed, trusted_keys=[key[1]], private_copy=True)
    begin, _ = weights_range(signed)
    middle = 1 << 19  # an element in the middle of the array, whose page is mapped
    rewrite_in_place(signed, begin + 4 * middle, begin + 4 * middle + 4, 0)
    assert shared["weight_at"](middle) == 0.0  # seen: the weights are the file's pages
    assert private["weight_at"](middle) == float(middle)  # not seen: copied at load
    assert private["answer"]() == 42


def test_replacing_the_file_changes_nothing_loaded(signed, key, tmp_path):
    root = modpack.load_module(signed, trusted_keys=[key[1]])
    other = tmp_path / "other.so"
    other.write_bytes(b"\0" * signed.stat().st_size)
    os.replace(other, signed)  # how files are updated: a new file renamed over the old
    assert root["weight_at"](99) == 99.0 and root["answer"]() == 42


TRUNCATE = r"""
import sys, modpack
root = modpack.load_module(sys.argv[1], trusted_keys=[sys.argv[2]],
                           private_copy=sys.argv[3] == "private")
open(sys.argv[1], "r+b").truncate(4096)
print(root["weight_at"](1 << 19), flush=True)
"""


@pytest.mark.parametrize("mode", ["shared", "private"])
def test_truncating_the_file_after_the_load(signed, key, mode):
    """A mapped file cut short faults on the next read of what is gone (SIGBUS), as any mapped
    file does; a private copy is immune."""
    proc = subprocess.run([sys.executable, "-c", TRUNCATE, str(signed), str(key[1]), mode],
                          capture_output=True, text=True)
    if mode == "private":
        assert proc.returncode == 0 and proc.stdout.strip() == str(float(1 << 19)), proc.stderr
    else:
        assert proc.returncode == -signal.SIGBUS, (proc.returncode, proc.stderr)


def test_a_changed_weight_byte_is_refused(signed, key):
    """The weights are hashed through the mapping itself: a change there fails the signature."""
    begin, _ = weights_range(signed)
    rewrite_in_place(signed, begin + (1 << 20), begin + (1 << 20) + 1, 0x7F)
    with pytest.raises(modpack.SignatureError, match="changed after it was signed"):
        modpack.load_module(signed, trusted_keys=[key[1]])


def _status(field: str) -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(field)


SCALE = r"""
__kernel void scale(__global const float* x, __global float* y, int n) {
  int i = get_global_id(0);
  if (i < n) y[i] = x[i] * 2.0f;
}
"""


def test_device_code_comes_from_the_verified_copy(key, tmp_path):
    """An OpenCL kernel is built at its first call, long after the load: rewriting its source
    in the file in between changes nothing (device code is in the verified copy)."""
    host = modpack.csource_module("int placeholder;")
    padding = "/* " + "padding " * (1 << 18) + "*/\n"  # 2 MiB: as large as a window would be
    host.import_module(modpack.opencl_module(padding + SCALE))
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    path = host.export_library(tmp_path / "kernels.so")
    sign_library(path, key[0])
    root = modpack.load_module(path, trusted_keys=[key[1]])
    data = path.read_bytes()
    at = data.index(b"* 2.0f")
    rewrite_in_place(path, at + 2, at + 3, ord("9"))  # the file's kernel now multiplies by 9
    assert b"* 9.0f" in path.read_bytes()
    x = modpack.array(np.arange(8, dtype=np.float32), device="opencl:0")
    y = modpack.empty((8,), "float32", device="opencl:0")
    root.imported_modules[0]["scale"](x, y, 8, 8, 1, 1, 0, 0, 0)
    assert np.array_equal(y.numpy(), np.arange(8, dtype=np.float32) * 2)


# ---- attacks: a writer racing the signed load -------------------------------------------------
#
# The plan of a signed load (which bytes stay mapped from the file: the weights) is made before
# the file is hashed. A writer who shows the planner a blob index whose const entry covers the
# next payload too (a kernel), then puts the signed index back before the hash reaches it, would
# keep that kernel's pages mapped from the file, where it could rewrite them after the load.
# The load makes the plan again from the verified copy and refuses a plan it does not confirm.


def attack_library(folder: Path, key, weight_bytes: int) -> dict:
    """A signed library whose const payload (weight_bytes of weights) is followed by an OpenCL
    kernel's (64 KiB of source, so whole pages of it), and what a racing writer needs: the blob
    index as signed, the index it shows the planner (the const entry stretched to the blob's
    end over the kernel, whose entry moves, empty, to that end; checksummed again, so that it
    parses), where they go, and the file range of the const data a window may map."""
    host = modpack.csource_module("int placeholder;")
    host.import_module(modpack.const_module({"w": np.ones(weight_bytes // 4, np.float32)}))
    host.import_module(modpack.opencl_module(SCALE + "/* " + "padding " * (1 << 13) + "*/\n"))
    path = host.export_library(folder / f"attacked-{weight_bytes >> 20}m.so")
    sign_library(path, key[0])
    offset, size = blob_extent(path)
    blob = bytearray(path.read_bytes()[offset:offset + size])
    index_size = struct.unpack_from("<Q", blob, 48)[0]
    signed = bytes(blob[:index_size])
    entries = layout(blob)["entries"]
    const_at, const_size = struct.unpack_from("<QQ", blob, entries + 48)
    end = size // 64 * 64
    struct.pack_into("<QQ", blob, entries + 48, const_at, end - const_at)
    struct.pack_into("<QQ", blob, entries + 96, end, 0)
    shown = bytes(reseal(blob)[:index_size])
    const = (offset + const_at, offset + const_at + const_size)
    return {"path": path, "at": offset, "signed": signed, "shown": shown, "const": const}


def unsigned_mappings(path: Path, const: tuple[int, int]) -> list[str]:
    """The mappings of |path| in this process that reach outside its signed const data."""
    outside = []
    for line in mappings_of(path):
        fields = line.split()
        low, high = (int(x, 16) for x in fields[0].split("-"))
        begin = int(fields[2], 16)
        if begin < const[0] or begin + high - low > const[1]:
            outside.append(line)
    return outside


@pytest.fixture(scope="module")
def timed_writer(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("timed-writer") / "timed_writer.so"
    run(os.environ.get("CC", "cc"), "-shared", "-fPIC", "-Wall", "-Wextra", "-Werror", "-o", out,
        ROOT / "tests" / "data" / "timed_writer.c", "-ldl")
    return out


TIMED_LOAD = r"""
import sys, modpack
try:
    modpack.load_module(sys.argv[1], trusted_keys=[sys.argv[2]])
    print("loaded")
except modpack.ModpackError as e:
    print(type(e).__name__, e)
"""


def test_a_writer_timed_to_the_plan_gets_no_kernel_mapped(key, tmp_path, timed_writer):
    """The worst case of the race, made certain: the file holds the index a writer shows the
    planner, and is given the signed one back right after the planner read it, before the hash
    reaches it (tests/data/timed_writer.c). The signature then holds, and the load is refused
    anyway: the plan made from the verified bytes does not leave the kernel in the file."""
    lib = attack_library(tmp_path, key, 4 << 20)
    path, at = lib["path"], lib["at"]
    (tmp_path / "signed.bin").write_bytes(lib["signed"])
    rewrite_bytes(path, at, lib["shown"])
    env = {**os.environ, "LD_PRELOAD": str(timed_writer), "TIMED_WRITER_FILE": str(path),
           "TIMED_WRITER_AT": str(at), "TIMED_WRITER_BYTES": str(tmp_path / "signed.bin")}
    proc = subprocess.run([sys.executable, "-c", TIMED_LOAD, str(path), str(key[1])],
                          capture_output=True, text=True, env=env)
    assert proc.stdout.startswith("SignatureError"), proc.stdout + proc.stderr
    assert "changed while it was being verified" in proc.stdout
    assert "not the data of a const payload of its signed blob index" in proc.stdout
    assert path.read_bytes()[at:at + len(lib["signed"])] == lib["signed"]  # the writer acted
    # Controls: the shown index alone fails the signature; the signed one loads, weights mapped.
    rewrite_bytes(path, at, lib["shown"])
    with pytest.raises(modpack.SignatureError, match="changed after it was signed"):
        modpack.load_module(path, trusted_keys=[key[1]])
    rewrite_bytes(path, at, lib["signed"])
    root = modpack.load_module(path, trusted_keys=[key[1]])
    assert mappings_of(path) and unsigned_mappings(path, lib["const"]) == []
    del root


def rewrite_bytes(path: Path, at: int, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.seek(at)
        f.write(data)


@pytest.mark.parametrize("weight_mib", [1, 32])
def test_an_index_flipping_writer_gets_no_unsigned_byte_used(key, tmp_path, weight_mib):
    """The reproducer's technique: another process flips the blob index between the signed one
    and the one shown to the planner every few hundred microseconds while this one makes 200
    signed loads. Whatever each load sees, none keeps a byte of the file mapped outside the
    signed const data, and every failure is a modpack error."""
    lib = attack_library(tmp_path, key, weight_mib << 20)
    path = lib["path"]

    def load() -> str:
        try:
            root = modpack.load_module(path, trusted_keys=[key[1]])
        except modpack.ModpackError as e:
            return str(e).split(":")[0].split(" (")[0].replace(str(path), "FILE")
        assert unsigned_mappings(path, lib["const"]) == [], mappings_of(path)
        assert root.imported_modules[0].arrays["w"].shape == ((weight_mib << 20) // 4,)
        del root
        gc.collect()
        return "loaded"

    outcomes = race(path, lib["at"], (lib["signed"], lib["shown"]), load)
    # Both ends of the race were reached: loads that hashed the signed index, loads that hashed
    # the shown one (the few whose planner saw one and hash the other are refused as changed
    # while verified: about 3 % here, and the timed writer above makes that case certain).
    assert outcomes.get("loaded", 0) > 0, outcomes
    assert outcomes.get("'FILE' was changed after it was signed", 0) > 0, outcomes
    assert set(outcomes) <= {"loaded", "'FILE' was changed after it was signed",
                             "'FILE' changed while it was being verified"}, outcomes



# ---- attacks: an edit in place with its modification time put back ---------------------------


def edit_keeping_mtime(path: Path, at: int) -> None:
    """Flip the byte at |at| of the file in place and put its access and modification times
    back (utime), as the file's owner can: only its change time then tells."""
    before = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        byte = f.read(1)
        f.seek(at)
        f.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert after.st_ctime_ns != before.st_ctime_ns


def test_a_weight_file_edited_with_its_mtime_put_back_is_refused(key, tmp_path):
    """A weight file in use, edited in place with its modification time put back, is not taken
    for the version already checked: the next load in the process, signed or not, refuses it
    (the checked reader was once reused by device, inode, size and modification time)."""
    weights = modpack.save_weights({"w": WEIGHTS}, tmp_path / "model.mpw")
    host = modpack.csource_module(HOST)
    host.import_module(modpack.weights_module(weights))
    path = host.export_library(tmp_path / "model.so")
    sign_library(path, key[0])
    first = modpack.load_module(path, trusted_keys=[key[1]])
    assert first["weight_at"](5) == 5.0
    edit_keeping_mtime(weights, weights.stat().st_size - 4096 - 100)  # in the array's data
    for trusted in ([key[1]], None):
        with pytest.raises(modpack.ModpackError, match="rewritten in place while an earlier "
                                                       "version of it is in use"):
            modpack.load_module(path, trusted_keys=trusted)
    assert first["weight_at"](5) == 5.0


def test_a_library_edited_with_its_mtime_put_back_is_refused(tmp_path):
    """The same for a library loaded from its file: a second load does not hand back the loaded
    version for a file whose bytes changed under it."""
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    path = host.export_library(tmp_path / "deploy.so")
    first = modpack.load_module(path)
    begin, _ = weights_range(path)
    edit_keeping_mtime(path, begin + 8)
    with pytest.raises(modpack.ModpackError, match="rewritten in place while an earlier version "
                                                   "of it is loaded"):
        modpack.load_module(path)
    assert first["answer"]() == 42


# ---- attacks on weight files ------------------------------------------------------------------


def stretched_index(path: Path) -> tuple[bytes, bytes]:
    """The index of the one-array weight file at |path| as written, and as a writer would show
    it: the array claiming all the file's bytes from its start (its shape and size grown, the
    header's data size too, the index checksum made again so that it parses)."""
    import xxhash

    data = path.read_bytes()
    index_size = struct.unpack_from("<Q", data, 16)[0]
    index = bytearray(data[:index_size])
    shape_offset = struct.unpack_from("<Q", index, 64 + 24)[0]
    offset = struct.unpack_from("<Q", index, 64 + 32)[0]
    grown = (len(data) - offset) // 4 * 4
    struct.pack_into("<Q", index, shape_offset, grown // 4)
    struct.pack_into("<Q", index, 64 + 40, grown)
    struct.pack_into("<Q", index, 40, offset + grown - struct.unpack_from("<Q", index, 32)[0])
    struct.pack_into("<Q", index, 56, 0)
    struct.pack_into("<Q", index, 56, xxhash.xxh3_64_intdigest(bytes(index)))
    return data[:index_size], bytes(index)


def test_a_loaded_weight_file_never_reads_its_index_again(tmp_path):
    """After the load, a writer who rewrites a weight file's index in place (an array claiming
    the whole file) changes no array's extent in the process: the index was read once, into
    private memory, and checked there."""
    path = modpack.save_weights({"w": WEIGHTS}, tmp_path / "model.mpw")
    weights = modpack.load_weights(path)
    _, shown = stretched_index(path)
    rewrite_bytes(path, 0, shown)
    assert path.read_bytes()[:len(shown)] == shown
    assert weights["w"].shape == WEIGHTS.shape and weights["w"][-1] == WEIGHTS[-1]
    assert list(weights) == ["w"] and weights["w"].nbytes == WEIGHTS.nbytes


def test_an_index_flipping_writer_never_gets_an_unsigned_extent(key, tmp_path):
    """A process flips a signed weight file's index between the signed one and one whose array
    claims the whole file, while this one makes 200 signed loads of it: every load either holds
    the signed array (its extent and digest) or is refused with a modpack error."""
    path = modpack.save_weights({"w": WEIGHTS}, tmp_path / "model.mpw")
    sign_library(path, key[0])
    signed, shown = stretched_index(path)

    def load() -> str:
        weights = modpack.load_weights(path, trusted_keys=[key[1]])
        assert weights["w"].shape == WEIGHTS.shape
        del weights
        gc.collect()
        return "loaded"

    outcomes = race(path, 0, (signed, shown), load)
    assert outcomes.get("loaded", 0) > 0 and len(outcomes) > 1, outcomes
