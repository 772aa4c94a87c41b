"""Export → load round trips: tree shapes, every module kind, .so and .tar, fresh process."""

from __future__ import annotations

import io
import os
import struct
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
from conftest import VADD_C, consts, run_python
from elftools.elf.elffile import ELFFile

import modpack
from modpack.tools.inspection import inspect_library


def tags(module: modpack.Module) -> list[int]:
    return [int(k[1:]) for k in module.arrays]


@pytest.mark.parametrize("suffix", [".so", ".tar"])
def test_chain(host, tmp, suffix):
    a, b, c = consts(1), consts(2), consts(3)
    host.import_module(a)
    a.import_module(b)
    b.import_module(c)
    root = modpack.load_module(host.export_library(tmp / f"chain{suffix}"))
    assert root.type_key == "library"
    m = root
    for expected in (1, 2, 3):
        (m,) = m.imported_modules
        assert m.type_key == "const" and tags(m) == [expected]
    assert m.imported_modules == []


def test_a_tar_is_linked_with_its_blob_placed_or_linked_whole(host, tmp, monkeypatch):
    """Loading a .tar links its host objects with an anchor and copies the blob from the
    archive into its own segment, as an export places it; where that cannot be (here: the
    linker is made to leave no program header for it), every object is linked. Both load
    the same tree from a sealed library, and remove their workspace."""
    import modpack.exporter.tar_link as tar_link
    from modpack.format.image import NoProgramHeaderSlot
    from modpack.format.seal import check_seal

    weights = np.arange(50_000, dtype=np.float32)
    host.import_module(modpack.const_module({"w": weights}))
    host.import_module(consts(4))
    path = host.export_library(tmp / "t.tar")
    linked = []

    link_tar = tar_link.link_tar

    def link_and_keep(*args, **kwargs):
        shared = link_tar(*args, **kwargs)
        check_seal(shared)  # sealed, as the load's own check requires
        linked.append((shared, shared.read_bytes()))
        return shared

    monkeypatch.setattr(tar_link, "link_tar", link_and_keep)  # the loader imports it per .tar
    placed = modpack.load_module(path)

    def no_slot(*args, **kwargs):
        raise NoProgramHeaderSlot("no program header left for the blob")

    monkeypatch.setattr(tar_link, "place_blob_into", no_slot)
    whole = modpack.load_module(path)
    for root in (placed, whole):
        assert root["add_int"](2, 3) == 5
        w, c = root.imported_modules
        np.testing.assert_array_equal(w.arrays["w"], weights)
        assert tags(c) == [4]
    (first, placed_bytes), (second, whole_bytes) = linked
    assert placed_bytes != whole_bytes  # two ways of linking, really taken
    assert not first.parent.exists() and not second.parent.exists()


def _one_member_tar(path: Path, name: str, data: bytes) -> Path:
    with tarfile.open(path, "w") as tar:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return path


def test_a_crafted_tar_is_refused_before_anything_is_linked(tmp):
    """An unsealed archive loaded with allow_unsealed: a member that would land outside the
    workspace is refused, and so is an archive with no object to link."""
    crafted = _one_member_tar(tmp / "crafted.tar", "../evil.o", b"\x7fELF")
    with pytest.raises(modpack.FormatError,
                       match=r"unsafe member name '\.\./evil\.o': its name is a path"):
        modpack.load_module(crafted, allow_unsealed=True)
    assert not (Path(tempfile.gettempdir()) / "evil.o").exists()  # beside the workspace
    empty = _one_member_tar(tmp / "empty.tar", "notes.txt", b"hi")
    with pytest.raises(modpack.FormatError, match="holds no object files to link"):
        modpack.load_module(empty, allow_unsealed=True)


def test_fan_out_keeps_import_order(host, tmp):
    for t in (5, 3, 9, 1):
        host.import_module(consts(t))
    root = modpack.load_module(host.export_library(tmp / "fan.so"))
    assert [tags(m)[0] for m in root.imported_modules] == [5, 3, 9, 1]


def test_diamond_loads_shared_module_once(host, tmp):
    a, b, shared = consts(1), consts(2), consts(3)
    host.import_module(a)
    host.import_module(b)
    a.import_module(shared)
    b.import_module(shared)
    root = modpack.load_module(host.export_library(tmp / "diamond.so"))
    la, lb = root.imported_modules
    assert la.imported_modules[0] is lb.imported_modules[0]
    assert tags(la.imported_modules[0]) == [3]


def test_cycles_are_refused_when_building():
    a, b = consts(1), consts(2)
    a.import_module(b)
    with pytest.raises(modpack.ModpackError, match="cycle"):
        b.import_module(a)


def test_const_arrays_round_trip_exactly(host, tmp):
    rng = np.random.default_rng(0)
    arrays = {
        "f32": rng.standard_normal((3, 5)).astype(np.float32),
        "f64": rng.standard_normal(7),
        "f16": rng.standard_normal(9).astype(np.float16),
        "i8": rng.integers(-128, 127, 33, dtype=np.int8),
        "u64": rng.integers(0, 2**63, (2, 2, 2), dtype=np.uint64),
        "bool": rng.integers(0, 2, 10).astype(bool),
        "c64": (rng.standard_normal(4) + 1j * rng.standard_normal(4)).astype(np.complex64),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 3), dtype=np.int16),
        "strided": np.arange(20, dtype=np.int32)[::2],
    }
    host.import_module(modpack.const_module(arrays))
    root = modpack.load_module(host.export_library(tmp / "consts.so"))
    loaded = root.imported_modules[0].arrays
    assert list(loaded) == list(arrays)
    for name, expected in arrays.items():
        got = loaded[name]
        assert got.dtype == expected.dtype and got.shape == expected.shape, name
        assert got.tobytes() == np.ascontiguousarray(expected).tobytes(), name
        assert not got.flags.writeable
        assert got.ctypes.data % 64 == 0 or got.size == 0, f"{name} is not 64-byte aligned"


def test_arrays_outlive_the_root(host, tmp):
    host.import_module(modpack.const_module({"w": np.arange(1000, dtype=np.float64)}))
    root = modpack.load_module(host.export_library(tmp / "alive.so"))
    w = root.imported_modules[0].arrays["w"]
    f = root["add_int"]
    del root
    import gc

    gc.collect()
    assert w.sum() == sum(range(1000))
    assert f(2, 3) == 5


def test_host_function_calls(host, tmp):
    root = modpack.load_module(host.export_library(tmp / "calls.so"))
    a = np.arange(16, dtype=np.float32)
    out = np.zeros_like(a)
    root["vadd"](a, a, out)
    assert np.array_equal(out, 2 * a)
    assert root.get_function("add_int")(40, 2) == 42
    with pytest.raises(modpack.ArgumentError, match="add_int: argument 1 must be long"):
        root["add_int"](1, "x")
    with pytest.raises(modpack.ArgumentError, match="expected 3 arguments, got 1"):
        root["vadd"](a)
    with pytest.raises(modpack.NotFoundError, match="no function named 'nope'"):
        root["nope"]


def test_llvm_module_with_signatures(tmp):
    ir = """
    define double @scale(double %x, i64 %k) {
      %kf = sitofp i64 %k to double
      %r = fmul double %x, %kf
      ret double %r
    }
    """
    mod = modpack.llvm_module(ir, signatures={"scale": "double(double, int64_t)"})
    mod.import_module(consts(7))
    root = modpack.load_module(mod.export_library(tmp / "llvm.so"))
    assert root["scale"](1.5, 4) == 6.0
    assert tags(root.imported_modules[0]) == [7]


def test_c_and_llvm_merge_into_one_library(host, tmp):
    ir = "define i64 @twice(i64 %x) {\n %r = mul i64 %x, 2\n ret i64 %r\n}\n"
    llvm = modpack.llvm_module(ir, signatures={"twice": "int64_t(int64_t)"})
    host.import_module(llvm)
    llvm.import_module(consts(4))
    root = modpack.load_module(host.export_library(tmp / "merged.so"))
    assert root.type_key == "library"
    assert root["twice"](21) == 42 and root["add_int"](1, 1) == 2
    assert [m.type_key for m in root.imported_modules] == ["const"]


def test_library_without_blob(host, tmp):
    path = host.export_library(tmp / "plain.so")
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        names = {s.name for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()}
    assert "__dev_mblob" not in names
    root = modpack.load_module(path)
    assert root.type_key == "library" and root.imported_modules == []


def test_load_in_fresh_process(host, tmp):
    host.import_module(modpack.const_module({"w": np.arange(6, dtype=np.int64).reshape(2, 3)}))
    path = host.export_library(tmp / "fresh.so")
    out = run_python(
        "import sys, modpack\n"
        "r = modpack.load_module(sys.argv[1])\n"
        "print(r.type_key, r.imported_modules[0].arrays['w'].tolist(), r['add_int'](2, 2))",
        str(path),
    )
    assert out.split() == ["library", "[[0,", "1,", "2],", "[3,", "4,", "5]]", "4"]


def test_loading_twice_returns_the_same_tree(host, tmp):
    host.import_module(consts(1))
    path = host.export_library(tmp / "twice.so")
    assert modpack.load_module(path) is modpack.load_module(path)


def test_export_is_atomic_on_compile_error(tmp):
    target = tmp / "broken.so"
    target.write_bytes(b"previous")
    bad = modpack.csource_module("this is not C;")
    with pytest.raises(modpack.CompileError, match="error"):
        bad.export_library(target)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp.iterdir()] == ["broken.so"]


def test_unusable_destinations_fail_before_any_work(host, tmp, monkeypatch):
    import modpack.toolchain.cc as cc

    def no_compiling(*args, **kwargs):
        raise AssertionError("the export compiled before checking its destination")

    monkeypatch.setattr(cc, "compile_c", no_compiling)
    with pytest.raises(modpack.ModpackError, match="is a directory"):
        host.export_library(tmp)
    with pytest.raises(modpack.ModpackError, match="does not exist"):
        host.export_library(tmp / "missing" / "x.so")
    if os.geteuid() != 0:  # (root writes into read-only folders)
        locked = tmp / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(modpack.ModpackError, match="not writable"):
            host.export_library(locked / "x.so")


def test_a_full_disk_is_named_and_the_old_file_kept(host, tmp, monkeypatch):
    import errno

    import modpack.exporter.finish as finish_module

    target = tmp / "full.so"
    target.write_bytes(b"previous")
    host.import_module(consts(1))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(finish_module, "place_blob_into", full)
    with pytest.raises(modpack.ModpackError, match="no space left on device") as info:
        host.export_library(target)
    assert str(tmp) in str(info.value) and "intact" in str(info.value)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp.iterdir()] == ["full.so"]


def test_workspace_dir_keeps_intermediates(host, tmp):
    host.import_module(consts(1))
    host.export_library(tmp / "ws.so", workspace_dir=tmp / "ws")
    assert {"lib0.c", "lib0.o", "anchor.o"} <= {p.name for p in (tmp / "ws").iterdir()}
    host.export_library(tmp / "ws2.so", workspace_dir=tmp / "ws2", packer="asm")
    assert {"anchor.S", "anchor.o"} <= {p.name for p in (tmp / "ws2").iterdir()}
    # A .tar: the host objects are kept; the blob object is written once, into the archive.
    host.export_library(tmp / "ws3.tar", workspace_dir=tmp / "ws3")
    kept = {p.name for p in (tmp / "ws3").iterdir()}
    assert {"lib0.c", "lib0.o"} <= kept and "devc.o" not in kept
    with tarfile.open(tmp / "ws3.tar") as tar:
        assert tar.getnames() == ["lib0.o", "devc.o", "MODPACK-SEAL"]


@pytest.mark.parametrize("packer", ["elf", "asm", "llvm"])
@pytest.mark.parametrize("linker", ["bfd", "gold", "lld", "mold"])
def test_every_packer_and_linker_make_the_same_blob(host, tmp, packer, linker, monkeypatch):
    import shutil

    tool = {"bfd": "ld.bfd", "gold": "ld.gold", "lld": "ld.lld", "mold": "mold"}[linker]
    if not shutil.which(tool):
        pytest.skip(f"{tool} is not installed (scripts/dev.sh installs it)")
    monkeypatch.setenv("MODPACK_LINKER", linker)
    host.import_module(modpack.const_module({"w": np.arange(1000, dtype=np.int16)}))
    path = host.export_library(tmp / f"{packer}-{linker}.so", packer=packer)
    from blobtools import read_blob

    reference = host.export_library(tmp / "reference.so", packer="asm")
    assert read_blob(path) == read_blob(reference)
    root = modpack.load_module(path)
    assert root.imported_modules[0].arrays["w"].tolist() == list(range(1000))
    assert root["add_int"](2, 2) == 4


def test_llvm_packer_and_custom_fpack(host, tmp):
    host.import_module(consts(2))
    root = modpack.load_module(host.export_library(tmp / "llvmpack.so", packer="llvm"))
    assert tags(root.imported_modules[0]) == [2]
    calls = []

    def fpack(blob, workspace):
        """A packer of one's own: assemble the blob file with .incbin directives."""
        calls.append(blob)
        from modpack.packers.directives import blob_directives

        source = workspace / "mine.S"
        source.write_text("\n".join(blob_directives(blob)) + "\n")
        subprocess.run(["cc", "-c", str(source), "-o", str(workspace / "mine.o")], check=True)
        return workspace / "mine.o"

    root = modpack.load_module(host.export_library(tmp / "custom.so", fpack_imports=fpack))
    assert calls and tags(root.imported_modules[0]) == [2]


def test_custom_fcompile(host, tmp):
    seen = {}

    def fcompile(output, objects, options):
        seen["objects"] = objects
        from modpack.toolchain import create_shared

        create_shared(output, objects, options)

    host.import_module(consts(3))
    root = modpack.load_module(host.export_library(tmp / "fc.so", fcompile=fcompile))
    # The host code, the seal note (the seal is written into it after the link), the blob.
    assert [os.path.basename(o) for o in seen["objects"]] == ["lib0.o", "seal.o", "devc.o"]
    assert tags(root.imported_modules[0]) == [3]


def test_an_fcompile_making_an_object_gets_the_blob_linked_in(host, tmp):
    """``ld -r`` as fcompile (README: any suffix works with an explicit fcompile): the blob goes
    through the link as an object instead of being placed into a shared library after it (it
    was "needs a 64-bit little-endian shared library (got ELF64, ET_REL)"). The object is kept
    as made, unsealed; a library linked from it later loads."""
    host.import_module(consts(7))

    def ld_r(output, objects, options):
        subprocess.run(["ld", "-r", "-o", output, *objects], check=True)

    made = host.export_library(tmp / "deploy.o", fcompile=ld_r)
    with open(made, "rb") as f:
        assert f.read(4) == b"\x7fELF" and ELFFile(f)["e_type"] == "ET_REL"
    linked = tmp / "linked.so"
    subprocess.run(["cc", "-shared", "-o", linked, made], check=True)
    root = modpack.load_module(linked, allow_unsealed=True)
    assert root["add_int"](2, 3) == 5 and tags(root.imported_modules[0]) == [7]


def test_an_fcompile_that_says_so_gets_the_blob_placed(host, tmp):
    """fcompile.output_format = "so" (TVM's convention): the blob is written into the linked
    library after the link; an fcompile that does not say so links it as an object."""
    from modpack.toolchain import create_shared

    def shared(output, objects, options):
        create_shared(output, objects, options)

    host.import_module(consts(4))
    linked = host.export_library(tmp / "linked.so", fcompile=shared)
    shared.output_format = "so"
    placed = host.export_library(tmp / "placed.so", fcompile=shared)
    for path, section in ((linked, ".lrodata.__dev_mblob"), (placed, ".modpack.blob")):
        report = inspect_library(path)
        assert report["blob"]["section"] == section and report["seal"]["state"] == "valid"
        assert tags(modpack.load_module(path).imported_modules[0]) == [4]


def test_an_object_file_is_not_loaded_as_a_library(tmp):
    host = modpack.csource_module(VADD_C)
    host.export_library(tmp / "ws.so", workspace_dir=tmp / "ws")
    for unsealed in (False, True):
        with pytest.raises(modpack.IncompatibleError,
                           match=r"lib0.o' is a relocatable object file, not a shared library: "
                                 r"a system library .* modpack.load_system_lib"):
            modpack.load_module(tmp / "ws" / "lib0.o", allow_unsealed=unsealed)


@pytest.mark.parametrize("name", ["deploy.o", "deploy.a", "deploy.zip", "deploy", "x.so.o"])
def test_unknown_suffixes_are_refused_before_any_work(tmp, name):
    with pytest.raises(modpack.ModpackError,
                       match=r"writes a shared library \(.so, or .so.N\) or objects to link "
                             r"later \(.tar\), not .*system_lib='NAME'.*explicit fcompile="):
        modpack.csource_module("#error never compiled").export_library(tmp / name)
    assert list(tmp.iterdir()) == []


def test_versioned_and_custom_suffixes(tmp):
    host = modpack.csource_module(VADD_C)
    assert modpack.load_module(host.export_library(tmp / "libvadd.so.1"))["add_int"](1, 2) == 3
    from modpack.toolchain import create_shared
    made = host.export_library(tmp / "vadd.plugin", fcompile=create_shared)  # explicit: any
    assert modpack.load_module(made)["add_int"](2, 2) == 4


def test_page_aligned_payloads(host, tmp):
    host.import_module(modpack.const_module({"w": np.arange(3000, dtype=np.float32)}))
    path = host.export_library(tmp / "paged.so", payload_alignment=4096)
    from blobtools import blob_extent

    from modpack.tools.inspection import inspect_library

    blob_offset, _ = blob_extent(path)
    (const,) = [m for m in inspect_library(path)["modules"] if m["type_key"] == "const"]
    assert (blob_offset + const["offset"]) % 4096 == 0  # file offset == address mod page
    w = modpack.load_module(path).imported_modules[0].arrays["w"]
    assert np.array_equal(w, np.arange(3000, dtype=np.float32))
    with pytest.raises(ValueError, match="power of two"):
        host.export_library(tmp / "bad.so", payload_alignment=192)


def test_void_functions_report_errors(tmp):
    host = modpack.csource_module(r"""
#include "modpack/backend.h"
static void check_positive(int64_t x) {
  if (x <= 0) mp_backend_errorf(MP_ERR_INVALID_ARGUMENT, "check_positive: %lld <= 0", (long long)x);
}
MP_EXPORT_VOID_FUNC(check_positive, int64_t)
""")
    root = modpack.load_module(host.export_library(tmp / "v.so"))
    root["check_positive"](3)
    with pytest.raises(modpack.ArgumentError, match="check_positive: -2 <= 0"):
        root["check_positive"](-2)
    root["check_positive"](1)  # the flag is per call, not sticky


def test_identical_payloads_are_stored_once(host, tmp):
    weights = np.arange(100_000, dtype=np.float32)
    a = modpack.const_module({"w": weights})
    b = modpack.const_module({"w": weights.copy()})
    c = modpack.const_module({"w": weights[::-1].copy()})
    for m in (a, b, c):
        host.import_module(m)
    path = host.export_library(tmp / "dedup.so")
    from modpack.tools.inspection import inspect_library

    mods = inspect_library(path)["modules"]
    assert mods[1]["offset"] == mods[2]["offset"] != mods[3]["offset"]
    assert path.stat().st_size < 2.5 * weights.nbytes  # two copies stored, not three
    la, lb, lc = modpack.load_module(path).imported_modules
    assert la is not lb  # still two modules, sharing bytes
    assert np.array_equal(lb.arrays["w"], weights) and np.array_equal(lc.arrays["w"], weights[::-1])


def test_ml_dtypes_round_trip(host, tmp):
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="bfloat16/float8 need ml_dtypes")
    names = ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e8m0fnu"]
    values = np.linspace(-2, 2, 17, dtype=np.float32)
    arrays = {n: values.astype(getattr(ml_dtypes, n)) for n in names}
    host.import_module(modpack.const_module(arrays))
    path = host.export_library(tmp / "ml.so")
    loaded = modpack.load_module(path).imported_modules[0].arrays
    for n, expected in arrays.items():
        assert loaded[n].dtype == expected.dtype, n
        assert loaded[n].tobytes() == expected.tobytes(), n
    from modpack.tools.inspection import inspect_library

    (const,) = [m for m in inspect_library(path)["modules"] if m["type_key"] == "const"]
    assert [a["dtype"] for a in const["contents"]["arrays"]] == names


def test_low_precision_arrays_round_trip_and_inspect_names_them(host, tmp):
    """Const arrays of packed float4 pairs (float4_e2m1fn_x2) and float8, from numpy and from a
    PyTorch tensor (through DLPack), load back typed and byte for byte, and inspect, in its
    report and its text, names each dtype as DLPack 1.1 and PyTorch do; numpy float4 values of
    ml_dtypes (one a byte, not DLPack's packing) are refused, naming the way to pack them."""
    ml_dtypes = pytest.importorskip("ml_dtypes", reason="float4/float8 need ml_dtypes")
    values = np.array([[0.5, -6.0, 1.5, 3.0], [0.0, 4.0, -1.0, 2.0]], ml_dtypes.float4_e2m1fn)
    arrays: dict[str, object] = {
        "fp4": modpack.pack_float4(values),
        "f8": np.array([0.5, -448.0, 3.0], ml_dtypes.float8_e4m3fn),
    }
    torch = None
    try:
        import torch
    except ImportError:
        pass
    if torch is not None and hasattr(torch, "float8_e5m2"):
        arrays["t8"] = torch.tensor([1.0, -2.0, 0.5]).to(torch.float8_e5m2)
    host.import_module(modpack.const_module(arrays))
    path = host.export_library(tmp / "lowp.so")
    loaded = modpack.load_module(path).imported_modules[0].arrays
    assert loaded["fp4"].dtype == modpack.float4_e2m1fn_x2
    assert np.array_equal(modpack.unpack_float4(loaded["fp4"]), values)
    assert loaded["f8"].tobytes() == arrays["f8"].tobytes()
    if "t8" in arrays:
        assert loaded["t8"].dtype == np.dtype(ml_dtypes.float8_e5m2)
        assert loaded["t8"].astype(np.float32).tolist() == [1.0, -2.0, 0.5]
    from modpack.tools.inspection import inspect_library

    (const,) = [m for m in inspect_library(path)["modules"] if m["type_key"] == "const"]
    shown = {a["name"]: (a["dtype"], a["shape"]) for a in const["contents"]["arrays"]}
    assert shown["fp4"] == ("float4_e2m1fn_x2", [2, 2])
    assert shown["f8"] == ("float8_e4m3fn", [3])
    if "t8" in arrays:
        assert shown["t8"] == ("float8_e5m2", [3])
    text = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(path)],
                          capture_output=True, text=True, check=True).stdout
    assert "array fp4: float4_e2m1fn_x2[2, 2]" in text and "array f8: float8_e4m3fn[3]" in text
    with pytest.raises(modpack.ArgumentError,
                       match=r"const array 'v' is a numpy float4_e2m1fn array, .*"
                             r"modpack.pack_float4\(x\)"):
        modpack.const_module({"v": values})


def test_large_payloads_are_checked_through_the_sequential_path(tmp):
    """Payloads from 1 MiB are hashed with the mapping marked sequential: the digest is the
    writer's, and a byte changed near the end is caught (the library resealed, as a buggy
    writer would)."""
    from blobtools import read_blob, write_blob

    data = np.arange((9 << 20) // 8, dtype=np.uint64)
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"big": data}))
    path = host.export_library(tmp / "windows.so")
    assert np.array_equal(modpack.load_module(path).imported_modules[0].arrays["big"], data)
    del data
    damaged = tmp / "damaged.so"  # a copy: the loaded library's file must stay as it is
    damaged.write_bytes(path.read_bytes())
    blob = read_blob(damaged)
    blob[-100] ^= 1
    write_blob(damaged, blob)
    with pytest.raises(modpack.FormatError, match="payload checksum mismatch"):
        modpack.load_module(damaged)


def test_a_library_for_another_machine_says_which(host, tmp):
    import platform
    path = host.export_library(tmp / "foreign.so")
    data = bytearray(path.read_bytes())
    theirs, name = (183, "aarch64") if platform.machine() == "x86_64" else (62, "x86-64")
    data[18:20] = theirs.to_bytes(2, "little")  # e_machine
    path.write_bytes(bytes(data))
    with pytest.raises(modpack.IncompatibleError,
                       match=rf"foreign.so' was built for {name} \(64-bit, little-endian\); "
                             r"this machine is .*load it on a machine of its kind"):
        modpack.load_module(path)


def test_the_placement_reads_only_shared_libraries_it_can_edit(tmp):
    """The small ELF reader that placing the blob uses (modpack/format/elf64.py) refuses, with
    a ModpackError naming the file, what it cannot place a blob into: not ELF, 32-bit or
    big-endian ELF, an executable, header tables past the end of the file."""
    from modpack.errors import ModpackError
    from modpack.format.elf64 import Elf64

    library = modpack.csource_module("int x = 1;").export_library(tmp / "plain.so")
    good = library.read_bytes()
    with open(library, "rb") as f:
        elf = Elf64(f, library)
        assert elf.section(".dynsym") is not None and any(s.type == 1 for s in elf.segments)
    cases = {
        "not-elf": (b"\0" * 64, "no ELF magic"),
        "elf32": (good[:4] + b"\x01" + good[5:], "ELF32"),
        "big-endian": (good[:5] + b"\x02" + good[6:], "big-endian"),
        "executable": (good[:16] + struct.pack("<H", 2) + good[18:], "ET_EXEC"),
        "cut": (good[:200], "lie past its end"),
        "short": (good[:10], "lie past its end"),
    }
    for name, (data, message) in cases.items():
        path = tmp / f"{name}.so"
        path.write_bytes(data)
        with open(path, "rb") as f, pytest.raises(ModpackError, match=message):
            Elf64(f, path)
