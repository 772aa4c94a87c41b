"""`modpack inspect`: the report's contract, human output, errors, and that nothing is loaded."""

from __future__ import annotations

import io
import json
import platform
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest
import xxhash
from blobtools import covered
from conftest import VADD_C, consts, run_python

import modpack
from modpack.cli.main import format_inspection, main
from modpack.tools.inspection import inspect_library

TOP_KEYS = ["path", "producer", "machine", "format_version", "writer_version", "blob",
            "modules", "import_tree", "functions", "signatures", "seal", "content_digest",
            "signed_by", "loads", "metadata", "selftests"]
BLOB_KEYS = ["symbol", "section", "file_offset", "size", "index_size", "index_checksum",
             "payload_checksums", "metadata_offset", "metadata_size", "selftests_offset",
             "selftests_size"]
MODULE_KEYS = [
    "index", "type_key", "offset", "size", "checksum", "children", "parents", "contents",
]


def _dl_name(dtype) -> str:
    kind = {"f": "float", "i": "int", "u": "uint", "b": "bool"}[dtype.kind]
    return f"{kind}{dtype.itemsize * 8}"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "modpack", *args], capture_output=True,
                          text=True)


def diamond(tmp: Path) -> tuple[modpack.Module, Path]:
    """host -> a, b; a -> shared; b -> shared."""
    host = modpack.csource_module(VADD_C)
    a, b, shared = consts(1), consts(2), consts(3)
    host.import_module(a)
    host.import_module(b)
    a.import_module(shared)
    b.import_module(shared)
    return host, host.export_library(tmp / "diamond.so")


@pytest.fixture
def diamond_so(tmp: Path) -> tuple[modpack.Module, Path]:
    return diamond(tmp)


def test_diamond_matches_the_serializer_plan(diamond_so):
    root, path = diamond_so
    plan = modpack.ModuleSerializer(root).plan
    report = inspect_library(path)

    assert list(report) == TOP_KEYS
    assert report["path"] == str(path)
    assert report["format_version"] == "1.0"
    assert report["writer_version"] == modpack.__version__
    blob = report["blob"]
    assert list(blob) == BLOB_KEYS
    assert blob["symbol"] == "__dev_mblob"
    assert blob["section"] == ".modpack.blob"  # the anchor's section, pointed at the blob
    assert blob["payload_checksums"] is True
    assert 0 < blob["index_size"] <= blob["size"]
    assert len(blob["index_checksum"]) == 16 and int(blob["index_checksum"], 16) >= 0

    modules = report["modules"]
    assert [m["index"] for m in modules] == list(range(len(plan.nodes)))
    assert [m["type_key"] for m in modules] == plan.type_keys == ["_lib", "const", "const", "const"]
    assert report["import_tree"] == {"row_ptr": plan.row_ptr, "child_indices": plan.child_indices}
    parents: list[list[int]] = [[] for _ in modules]
    data = path.read_bytes()
    for m, node in zip(modules, plan.nodes, strict=True):
        i = m["index"]
        assert list(m) == MODULE_KEYS
        children = plan.child_indices[plan.row_ptr[i]:plan.row_ptr[i + 1]]
        assert m["children"] == children
        for c in children:
            parents[c].append(i)
        if node is None:
            assert (m["offset"], m["size"], m["checksum"], m["contents"]) == (0, 0, None, None)
            continue
        expected_arrays = [
            {"name": n, "dtype": _dl_name(a.dtype), "shape": list(a.shape)}
            for n, a in node.arrays.items()
        ]
        assert m["contents"] == {"functions": [], "arrays": expected_arrays}
        assert m["size"] == node.payload_size()
        assert m["offset"] % 64 == 0 and m["offset"] >= blob["index_size"]
        # The offsets are right: the checksum matches the bytes where the report says they are.
        start = blob["file_offset"] + m["offset"]
        assert m["checksum"] == f"{xxhash.xxh3_64_intdigest(data[start:start + m['size']]):016x}"
    assert [m["parents"] for m in modules] == parents
    shared = [m for m in modules if len(m["parents"]) == 2]
    assert len(shared) == 1 and shared[0]["children"] == []
    assert report["functions"] == ["add_int", "vadd"]


def test_json_on_stdout_in_process(diamond_so, capsys):
    _, path = diamond_so
    assert main(["inspect", str(path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    assert json.loads(out) == {"schema_version": 1, **inspect_library(path)}


def test_library_without_blob(tmp):
    path = modpack.csource_module(VADD_C).export_library(tmp / "host_only.so")
    report = inspect_library(path)
    seal = report.pop("seal")
    assert seal["state"] == "valid" and len(seal["digest"]) == 32  # host code is sealed too
    import hashlib
    assert report.pop("content_digest") == f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}"
    assert report.pop("loads") == {"ok": True, "stage": None, "message": None}
    assert report == {
        "path": str(path),
        "producer": "modpack",
        "machine": platform.machine(),
        "format_version": None,
        "writer_version": None,
        "blob": None,
        "modules": [{"index": 0, "type_key": "library", "offset": 0, "size": 0,
                     "checksum": None, "children": [], "parents": [], "contents": None}],
        "import_tree": {"row_ptr": [0, 0], "child_indices": []},
        "functions": ["add_int", "vadd"],
        "signatures": {},
        "signed_by": [],
        "metadata": None,
        "selftests": None,
    }
    proc = run_cli("inspect", str(path))
    assert proc.returncode == 0, proc.stderr
    assert "no __dev_mblob" in proc.stdout and "library" in proc.stdout
    assert "add_int" in proc.stdout and "vadd" in proc.stdout
    assert f"seal               valid (XXH3-128 {seal['digest']})" in proc.stdout
    data = bytearray(path.read_bytes())
    data[data.index(b"add_int")] ^= 1  # in the dynamic string table, which the seal covers
    path.write_bytes(bytes(data))
    assert inspect_library(path)["seal"]["state"] == "damaged"
    assert "seal               DAMAGED: " in run_cli("inspect", str(path)).stdout


def test_human_output(diamond_so, capsys):
    _, path = diamond_so
    assert main(["inspect", str(path)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    report = inspect_library(path)
    assert "format version     1.0" in out
    assert f"modpack {modpack.__version__}" in out
    assert "_lib (host code)" in out and "const" in out
    assert report["blob"]["index_checksum"] in out
    assert "payload checksums: yes" in out
    for m in report["modules"][1:]:
        assert m["checksum"] in out
    tree = out.split("import tree\n", 1)[1].split("\n\n", 1)[0].splitlines()
    # The shared module appears under both parents, marked shared.
    assert sum("shared" in line for line in tree) == 2
    assert tree[0].strip() == "[0] _lib (host code)"
    assert out.rstrip().endswith("add_int\n  vadd")


def test_tree_drawing_survives_a_deep_chain():
    depth = 5000
    modules = [{"index": i, "type_key": "const", "offset": 64 * i, "size": 1, "checksum": "0" * 16,
                "children": [i + 1] if i + 1 < depth else [], "parents": [i - 1] if i else []}
               for i in range(depth)]
    report = {"path": "x.so", "format_version": "1.0", "writer_version": "0.1.0",
              "blob": {"symbol": "__dev_mblob", "section": ".lrodata", "file_offset": 0,
                       "size": 1, "index_size": 1, "index_checksum": "0" * 16,
                       "payload_checksums": True},
              "modules": modules, "import_tree": {"row_ptr": [], "child_indices": []},
              "functions": []}
    out = format_inspection(report)
    assert f"[{depth - 1}] const" in out


def test_python_dash_m(diamond_so):
    _, path = diamond_so
    proc = run_cli("inspect", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
    assert json.loads(proc.stdout) == {"schema_version": 1, **inspect_library(path)}


def corrupt(path: Path, file_offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[file_offset] ^= 0xFF
    path.write_bytes(bytes(data))


def assert_clean_failure(proc: subprocess.CompletedProcess[str], *words: str) -> None:
    assert proc.returncode == 1
    assert proc.stdout == ""
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("modpack inspect: error: ")
    assert len(proc.stderr.strip().splitlines()) == 1
    for word in words:
        assert word in proc.stderr


def test_corrupt_payload(diamond_so):
    _, path = diamond_so
    report = inspect_library(path)
    module = report["modules"][2]
    corrupt(path, report["blob"]["file_offset"] + module["offset"] + module["size"] // 2)
    with pytest.raises(modpack.FormatError, match="payload checksum mismatch"):
        inspect_library(path)
    proc = run_cli("inspect", str(path))
    assert_clean_failure(proc, "checksum", "module[2]", str(path))


def test_corrupt_index(diamond_so):
    _, path = diamond_so
    report = inspect_library(path)
    corrupt(path, report["blob"]["file_offset"] + report["blob"]["index_size"] - 1)
    assert_clean_failure(run_cli("inspect", str(path), "--json"), "index checksum mismatch")


@pytest.mark.parametrize("cut", ["half", "last loaded byte"])
def test_truncated(diamond_so, cut):
    """A cut into what the loader maps (what the seal covers) is refused as truncated: half the
    file, or only its last covered byte."""
    _, path = diamond_so
    data = path.read_bytes()
    last = int(np.flatnonzero(covered(path))[-1])
    keep = len(data) // 2 if cut == "half" else last
    assert keep <= last  # the cut takes bytes the loader reads
    path.write_bytes(data[:keep])
    with pytest.raises(modpack.FormatError, match="truncated"):
        inspect_library(path)
    assert_clean_failure(run_cli("inspect", str(path)), "truncated")


def test_a_cut_after_the_loaded_part_inspects(diamond_so):
    """The file's last 1 % (section headers, the trailer; more if need be, never a byte the
    seal covers) is what no loader reads: the library still loads (version 2 seal,
    tests/test_bad_input.py), so inspect reads it as the loader does, in full."""
    _, path = diamond_so
    whole = inspect_library(path)
    data = path.read_bytes()
    keep = max(int(len(data) * 0.99), int(np.flatnonzero(covered(path))[-1]) + 1)
    assert keep < len(data)
    path.write_bytes(data[:keep])
    report = inspect_library(path)
    assert report["loads"] == {"ok": True, "stage": None, "message": None}
    assert report["modules"] == whole["modules"] and report["functions"] == whole["functions"]
    assert report["blob"]["file_offset"] == whole["blob"]["file_offset"]
    assert run_cli("inspect", str(path)).returncode == 0


@pytest.mark.parametrize("content", [b"", b"\x7fEL", b"hello, not a library\n" * 10,
                                     b"\x7fELF" + bytes(60)])
def test_not_elf(tmp, content):
    path = tmp / "bogus.so"
    path.write_bytes(content)
    with pytest.raises(modpack.FormatError):
        inspect_library(path)
    assert_clean_failure(run_cli("inspect", str(path)), str(path))


def test_missing_file(tmp):
    assert_clean_failure(run_cli("inspect", str(tmp / "absent.so")), "absent.so")


def test_usage_errors_exit_2():
    assert run_cli().returncode == 2
    assert run_cli("inspect").returncode == 2


CONSTRUCTOR_C = r"""
#include <stdio.h>
__attribute__((constructor)) static void modpack_test_constructor(void) {
  FILE* f = fopen(MARKER, "w");
  if (f) { fputs("constructor ran\n", f); fclose(f); }
}
"""


def test_inspect_runs_no_code_from_the_library(tmp):
    marker = tmp / "constructor-ran"
    code = f"#define MARKER {json.dumps(str(marker))}\n{CONSTRUCTOR_C}{VADD_C}"
    host = modpack.csource_module(code)
    host.import_module(consts(1))
    path = host.export_library(tmp / "constructor.so")
    assert not marker.exists()

    report = inspect_library(path)
    assert [m["type_key"] for m in report["modules"]] == ["_lib", "const"]
    proc = run_cli("inspect", str(path))
    assert proc.returncode == 0, proc.stderr
    assert not marker.exists(), "inspect ran the library's constructor"

    # The control: loading the library does run it, so the check above can fail.
    run_python("import sys, modpack; modpack.load_module(sys.argv[1])", str(path))
    assert marker.read_text() == "constructor ran\n"


def test_inspect_a_tar_export(tmp_path):
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(5, dtype=np.int32)}))
    tar = host.export_library(tmp_path / "deploy.tar")
    so = host.export_library(tmp_path / "deploy.so")
    from_tar = json.loads(run_cli("inspect", str(tar), "--json").stdout)
    from_so = json.loads(run_cli("inspect", str(so), "--json").stdout)
    assert from_tar["path"] == str(tar)
    for key in ("format_version", "modules", "import_tree", "functions"):
        assert from_tar[key] == from_so[key], key
    assert from_tar["functions"] == ["add_int", "vadd"]


@pytest.mark.parametrize("name", ["../escape.o", "/abs/escape.o", "sub/../../escape.o"])
def test_inspect_a_tar_with_unsafe_member_names(tmp_path, name):
    """A tar whose object names would land outside the scratch directory is a clean
    FormatError, never a traceback."""
    host = modpack.csource_module(VADD_C)
    so = host.export_library(tmp_path / "deploy.so")
    data = so.read_bytes()
    tar = tmp_path / "evil.tar"
    with tarfile.open(tar, "w") as out:
        info = tarfile.TarInfo(name)
        info.size = len(data)
        out.addfile(info, io.BytesIO(data))
    with pytest.raises(modpack.FormatError, match="unsafe member name"):
        inspect_library(tar)
    proc = run_cli("inspect", str(tar))
    assert_clean_failure(proc, str(tar), "unsafe member name", repr(name))


def test_the_quickstart_leaves_what_the_readme_inspects_next(tmp_path):
    """The README's first two commands: the demo, then `modpack inspect deploy.so` in the same
    folder."""
    demo = Path(__file__).resolve().parents[1] / "examples" / "quickstart" / "demo.py"
    done = subprocess.run([sys.executable, str(demo)], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "matches numpy: yes" in done.stdout and "modpack inspect deploy.so" in done.stdout
    shown = subprocess.run([sys.executable, "-m", "modpack", "inspect", "deploy.so"],
                           cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "const" in shown.stdout


def test_a_damaged_library_is_reported_with_a_non_zero_exit(diamond_so, tmp_path):
    """inspect reads what the loader would refuse as refused: the report, and exit status 1."""
    damaged = tmp_path / "damaged.so"
    data = bytearray(diamond_so[1].read_bytes())
    data[0x30] ^= 0x01  # e_shnum's low byte: the section headers say one more
    damaged.write_bytes(bytes(data))
    with pytest.raises(modpack.FormatError):
        modpack.load_module(damaged)
    proc = run_cli("inspect", str(damaged))
    assert proc.returncode == 1
    assert "damaged" in proc.stderr or "do not match its seal" in proc.stderr
