"""Signed libraries: `modpack sign` adds Ed25519 signatures; load_module(trusted_keys=...) and
mp_module_load_signed refuse a library that no trusted key signed exactly as it is, before any
of its code runs (a constructor in the library writes a marker file when it does run);
`modpack verify` checks seal, payloads and signatures without loading."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from blobtools import covered, note_offset
from conftest import build_c_program, run
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

import modpack
from modpack.format.signatures import sign_library
from modpack.tools.inspection import inspect_library

# A constructor: it runs when the library is mapped, before any modpack call could stop it.
HOST = r"""
#include <stdio.h>
#include <stdlib.h>
#include "modpack/backend.h"
__attribute__((constructor)) static void mark(void) {
  const char* path = getenv("MODPACK_TEST_MARKER");
  FILE* f = path ? fopen(path, "w") : NULL;
  if (f) { fputs("constructor ran\n", f); fclose(f); }
}
static double first_weight(void) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[0];
}
MP_EXPORT_FUNC0(first_weight, double)
"""

LOAD = r"""
import sys
import modpack
try:
    root = modpack.load_module(sys.argv[1], trusted_keys=sys.argv[2:])
    print("loaded", root["first_weight"]())
except modpack.FormatError as exc:  # SignatureError, or damage found before it
    print("refused:", type(exc).__name__, exc)
"""


def write_key(folder: Path, name: str) -> tuple[Path, Path]:
    """(private PEM, public PEM) of a new Ed25519 key, as openssl genpkey / pkey -pubout."""
    key = Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    private.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM,
                                                     PublicFormat.SubjectPublicKeyInfo))
    return private, public


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("keys")
    return {name: write_key(folder, name) for name in ("alice", "bob")}


@pytest.fixture(scope="module")
def unsigned(tmp_path_factory) -> Path:
    host = modpack.csource_module(HOST)
    host.import_module(modpack.const_module({"w": np.full(4096, 1.5, np.float32)}))
    return host.export_library(tmp_path_factory.mktemp("unsigned") / "deploy.so")


def signed_copy(unsigned: Path, folder: Path, *signers: Path) -> Path:
    path = folder / "signed.so"
    shutil.copyfile(unsigned, path)
    for key in signers:
        sign_library(path, key)
    return path


def load_in_a_fresh_process(path: Path, trusted: list[Path], marker: Path) -> str:
    marker.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-c", LOAD, str(path), *map(str, trusted)],
                          capture_output=True, text=True,
                          env={**os.environ, "MODPACK_TEST_MARKER": str(marker)})
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_a_library_signed_by_a_trusted_key_loads(unsigned, keys, tmp_path):
    path = signed_copy(unsigned, tmp_path, keys["alice"][0])
    marker = tmp_path / "marker"
    assert load_in_a_fresh_process(path, [keys["alice"][1]], marker) == "loaded 1.5"
    assert marker.read_text() == "constructor ran\n"  # the marker works: constructors run


@pytest.mark.parametrize("case", ["unsigned", "another key", "a code byte", "a payload byte",
                                  "the seal", "the signature", "the seal note's header"])
def test_refused_before_any_of_its_code_runs(unsigned, keys, tmp_path, case):
    path = unsigned if case == "unsigned" else signed_copy(
        unsigned, tmp_path, keys["bob" if case == "another key" else "alice"][0])
    if case not in ("unsigned", "another key"):
        data = bytearray(path.read_bytes())
        report = inspect_library(unsigned)
        blob = report["blob"]
        note = note_offset(unsigned)
        offset = {"a code byte": data.index(b"first_weight"),  # in .dynstr
                  "a payload byte": blob["file_offset"] + report["modules"][1]["offset"] + 8,
                  "the seal": note + 20 + 48,  # its digest
                  "the signature": note + 20 + 72 + 48,  # the first slot's signature
                  "the seal note's header": note}[case]
        data[offset] ^= 0x01
        path.write_bytes(bytes(data))
    marker = tmp_path / "marker"
    out = load_in_a_fresh_process(path, [keys["alice"][1]], marker)
    expected = ("FormatError" if case in ("the seal", "the seal note's header")  # damage
                else "SignatureError")
    assert out.startswith(f"refused: {expected} "), out
    assert not marker.exists(), f"{case}: the library's constructor ran"


def test_signatures_live_in_the_seal_note_and_survive_stripping(unsigned, keys, tmp_path):
    """A library sealed by its note is signed in place (no block appended): its size does not
    change, and a stripper, which keeps the seal, keeps the signatures valid."""
    path = signed_copy(unsigned, tmp_path, keys["alice"][0], keys["bob"][0])
    assert path.stat().st_size == unsigned.stat().st_size
    if shutil.which("strip") is None:
        pytest.skip("strip is not installed here")
    subprocess.run(["strip", "--strip-unneeded", str(path)], check=True)
    assert path.stat().st_size < unsigned.stat().st_size
    marker = tmp_path / "marker"
    assert load_in_a_fresh_process(path, [keys["bob"][1]], marker) == "loaded 1.5"
    report = modpack.verify_library(path, trusted_keys=[keys["alice"][1]])
    assert report["ok"] and len(report["signatures"]) == 2, report


def test_several_signatures_and_signing_again(unsigned, keys, tmp_path):
    path = signed_copy(unsigned, tmp_path, keys["alice"][0], keys["bob"][0], keys["alice"][0])
    report = inspect_library(path)
    assert len(report["signed_by"]) == 2  # signing again with alice replaced hers
    for trusted in ([keys["bob"][1]], [keys["alice"][1]], [keys["alice"][1], keys["bob"][1]]):
        assert modpack.load_module(path, trusted_keys=trusted)["first_weight"]() == 1.5
    # Without trusted keys signatures are ignored, and the file loads like any other.
    assert modpack.load_module(path)["first_weight"]() == 1.5


def test_what_loads_is_the_verified_copy(unsigned, keys, tmp_path):
    path = signed_copy(unsigned, tmp_path, keys["alice"][0])
    root = modpack.load_module(path, trusted_keys=[keys["alice"][1].read_bytes()])
    with open("/proc/self/maps") as maps:
        mapped = maps.read()
    assert "memfd:modpack-library" in mapped and str(path) not in mapped
    path.write_bytes(b"replaced after the check")  # the loaded tree does not care
    assert root["first_weight"]() == 1.5


def test_keys_are_checked(unsigned, keys, tmp_path):
    with pytest.raises(modpack.ArgumentError, match=r"trusted key 1: not a PEM public key"):
        modpack.load_module(unsigned, trusted_keys=[keys["alice"][0]])  # the private key
    with pytest.raises(modpack.ArgumentError, match="between 1 and 16 trusted keys"):
        modpack.load_module(unsigned, trusted_keys=[])
    with pytest.raises(modpack.ArgumentError, match="cannot read the trusted key"):
        modpack.load_module(unsigned, trusted_keys=[tmp_path / "absent.pem"])
    with pytest.raises(modpack.ModpackError, match="carries no modpack seal"):
        (tmp_path / "junk.so").write_bytes(b"junk" * 100)
        sign_library(tmp_path / "junk.so", keys["alice"][0])


def test_the_cli(unsigned, keys, tmp_path):
    path = tmp_path / "cli.so"
    shutil.copyfile(unsigned, path)

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "modpack", *args], capture_output=True,
                              text=True)

    unsigned_check = cli("verify", str(path), "--key", str(keys["alice"][1]))
    assert unsigned_check.returncode == 1 and "the library is not signed" in unsigned_check.stdout
    signed = cli("sign", str(path), "--key", str(keys["alice"][0]))
    assert signed.returncode == 0 and signed.stdout.startswith(f"signed {path} with key ")
    good = cli("verify", str(path), "--key", str(keys["alice"][1]))
    assert good.returncode == 0 and good.stdout.rstrip().endswith("\nverified"), good.stdout
    wrong = cli("verify", str(path), "--key", str(keys["bob"][1]))
    assert wrong.returncode == 1 and "no signature by a trusted key" in wrong.stdout
    assert cli("verify", str(path)).returncode == 0  # no keys: seal and payloads only
    inspected = cli("inspect", str(path))
    assert "signed by" in inspected.stdout and inspected.returncode == 0
    data = bytearray(path.read_bytes())
    report = inspect_library(unsigned)
    data[report["blob"]["file_offset"] + report["modules"][1]["offset"] + 100] ^= 0xFF
    path.write_bytes(bytes(data))
    damaged = cli("verify", str(path), "--key", str(keys["alice"][1]), "--json")
    assert damaged.returncode == 1
    checks = json.loads(damaged.stdout)["checks"]
    by_name = {c["check"]: c for c in checks}
    assert by_name["seal"]["ok"] is True  # payloads are not the seal's
    assert by_name["payloads"]["ok"] is False and "checksum" in by_name["payloads"]["message"]
    signature = [c for c in checks if c["check"] == "signature" and c.get("key_id")]
    assert signature and signature[0]["ok"] is False
    assert "changed after it was signed" in signature[0]["message"]


def test_from_c(unsigned, keys, runtime_prefix, tmp_path):
    path = signed_copy(unsigned, tmp_path, keys["alice"][0])
    exe = build_c_program(runtime_prefix, r"""
#include <stdio.h>
#include <string.h>
#include "modpack/modpack.h"
static int load(const char* path, const char* pem) {
  mp_trusted_key_t key;
  if (mp_trusted_key_from_pem(pem, strlen(pem), &key) != MP_OK) return -1;
  mp_module_t* root = NULL;
  mp_status_t s = mp_module_load_signed(path, &key, 1, 0, &root);
  printf("%d %s\n", (int)s, s ? mp_error_message() : "loaded");
  mp_module_release(root);
  return s;
}
static char buffer[2][4096];
static const char* slurp(const char* path, int i) {
  FILE* f = fopen(path, "r");
  size_t n = f ? fread(buffer[i], 1, sizeof buffer[i] - 1, f) : 0;
  if (f) fclose(f);
  buffer[i][n] = 0;
  return buffer[i];
}
int main(int argc, char** argv) {
  (void)argc;
  load(argv[1], slurp(argv[2], 0)); /* trusted: loads */
  load(argv[1], slurp(argv[3], 1)); /* another key: refused */
  return 0;
}
""", tmp_path / "signed")
    lines = run(exe, path, keys["alice"][1], keys["bob"][1]).splitlines()
    assert lines[0] == "0 loaded", lines
    assert lines[1].startswith("11 ") and "signed only by keys that are not trusted" in lines[1]


def test_openssl_keys_work_too(unsigned, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl command")
    run("openssl", "genpkey", "-algorithm", "ed25519", "-out", tmp_path / "k.pem")
    run("openssl", "pkey", "-in", tmp_path / "k.pem", "-pubout", "-out", tmp_path / "k.pub.pem")
    path = signed_copy(unsigned, tmp_path, tmp_path / "k.pem")
    assert modpack.load_module(path, trusted_keys=[tmp_path / "k.pub.pem"])["first_weight"]() == 1.5


SWEEP = r"""
import sys
import modpack
loaded = []
for path in sys.argv[2:]:
    try:
        modpack.load_module(path, trusted_keys=[sys.argv[1]])
        loaded.append(path)
    except modpack.FormatError:
        pass
print(len(loaded), *loaded)
"""


def test_one_changed_byte_anywhere_is_refused_before_any_code_runs(unsigned, keys, tmp_path):
    """A byte changed at 97 places spread over the whole signed file (headers, code, blob
    index, payloads, seal, signatures): every copy whose change reaches what a load reads is
    refused, no constructor ever run; a change to what nothing loads (section headers, .symtab,
    the trailer) is not signed, and the copy loads."""
    signed = signed_copy(unsigned, tmp_path, keys["alice"][0])
    good = signed.read_bytes()
    note = note_offset(signed)
    signed_part = covered(signed)
    signed_part[note + 20 + 72:note + 20 + 584] = True  # the slots: a changed one is refused
    copies: dict[bool, list[Path]] = {True: [], False: []}
    for k, offset in enumerate(sorted({*range(0, len(good), max(1, len(good) // 96)),
                                       len(good) - 1, note + 30, note + 20 + 72 + 60})):
        bad = bytearray(good)
        bad[offset] ^= 1 << (k % 8)
        path = tmp_path / f"copy{offset}.so"
        path.write_bytes(bytes(bad))
        copies[bool(signed_part[offset])].append(path)

    def sweep(paths: list[Path]) -> list[str]:
        marker.unlink(missing_ok=True)
        proc = subprocess.run([sys.executable, "-c", SWEEP, str(keys["alice"][1]),
                               *map(str, paths)], capture_output=True, text=True,
                              env={**os.environ, "MODPACK_TEST_MARKER": str(marker)})
        assert proc.returncode == 0, proc.stderr
        return proc.stdout.split()

    marker = tmp_path / "marker"
    assert sweep(copies[True])[0] == "0" and not marker.exists()
    assert len(copies[True]) >= 60 and len(copies[False]) >= 3, {k: len(v) for k, v in
                                                                  copies.items()}
    assert sweep(copies[False])[0] == str(len(copies[False]))


def test_several_keys_in_one_sign_and_the_python_report(unsigned, keys, tmp_path):
    path = tmp_path / "two.so"
    shutil.copyfile(unsigned, path)
    proc = subprocess.run([sys.executable, "-m", "modpack", "sign", str(path),
                           "--key", str(keys["alice"][0]), "--key", str(keys["bob"][0])],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and proc.stdout.count("signed ") == 2, proc.stdout + proc.stderr
    report = modpack.verify_library(path, trusted_keys=[keys["bob"][1]])
    assert report["ok"] and len(report["signatures"]) == 2
    assert [s["trusted"] for s in report["signatures"]] == [False, True]
    assert not modpack.verify_library(unsigned, trusted_keys=[keys["bob"][1]])["ok"]
    with pytest.raises(modpack.MissingFileError):
        modpack.verify_library(tmp_path / "absent.so")


def test_signing_keys_are_checked(unsigned, keys, tmp_path):
    from cryptography.hazmat.primitives.asymmetric import ec

    path = tmp_path / "k.so"
    shutil.copyfile(unsigned, path)
    with pytest.raises(modpack.ArgumentError, match="not an unencrypted PEM private key"):
        sign_library(path, keys["alice"][1])  # the public key
    other = ec.generate_private_key(ec.SECP256R1()).private_bytes(
        Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
    with pytest.raises(modpack.ArgumentError, match="not an Ed25519 key"):
        sign_library(path, other)
    assert path.read_bytes() == unsigned.read_bytes()  # refused: the file is untouched
