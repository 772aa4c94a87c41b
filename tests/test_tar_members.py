"""The rule for a .tar export's members (modpack/format/tar_members.py), and the readers of
untrusted tar headers under fuzzing: every name the rule must refuse is refused, and headers
changed at random (then sealed anew, as anyone can) get a verdict from every reader that the
loader shares, with nothing raised but modpack's errors."""

from __future__ import annotations

import random
import tarfile

import pytest
from conftest import VADD_C

import modpack
from modpack.format.tar_blob import find_tar_blob
from modpack.format.tar_members import NAME_BYTES, name_problem
from modpack.format.tar_seal import check_tar_seal, seal_tar
from modpack.tools.verdict import check_file


@pytest.mark.parametrize("name", ["", ".", "..", "/lib0.o", "/tmp/lib0.o", "../lib0.o",
                                  "sub/lib0.o", "./lib0.o", "lib0.o/", "a\nb.o", "a\0b.o",
                                  "tab\t.o", "del\x7f.o", "x" * (NAME_BYTES - 1) + "é",
                                  "\udcff.o"])
def test_names_a_tar_export_cannot_hold(name):
    """Absolute names, ``..``, folders, control characters, names not UTF-8 or longer than a
    tar header's 100-byte name field: each is refused, saying why."""
    assert name_problem(name) is not None


@pytest.mark.parametrize("name", ["lib0.o", "devc.o", "MODPACK-SEAL", "a b.o", "x" * NAME_BYTES,
                                  "..o", "é.o", "lib0_0_libfoo.a.o"])
def test_names_a_tar_export_holds(name):
    assert name_problem(name) is None


_SYMBOLS = b"/.\0\n\x7f\xff 0123457gxLK-abc"


def _mutate(data: bytearray, header: int, rng: random.Random) -> bool:
    """Change one to three bytes of the 512-byte tar header at |header| (not its checksum
    field), then write the checksum tar readers check; whether the header changed."""
    before = bytes(data[header:header + 512])
    for _ in range(rng.randint(1, 3)):
        at = header + rng.choice([rng.randrange(0, 100), 156, rng.randrange(100, 148),
                                  rng.randrange(157, 512)])
        data[at] = rng.choice(_SYMBOLS)
    block = data[header:header + 512]
    block[148:156] = b" " * 8
    data[header + 148:header + 156] = b"%06o\0 " % sum(block)
    return bytes(data[header:header + 512]) != before


def test_fuzzed_tar_headers_get_one_verdict(tmp_path):
    """Random changes to the members' tar headers of a sealed export. As they are, every one
    is refused by the tar seal (the seal covers every header byte). Sealed anew over the
    change, the tar seal's check, the blob's finder and the verdict raise nothing but modpack's
    errors, and load_module accepts exactly what the verdict accepts (an accepted archive loads
    whole and runs)."""
    good = modpack.csource_module(VADD_C).export_library(tmp_path / "good.tar")
    with tarfile.open(good) as tar:
        headers = [m.offset for m in tar.getmembers()]
    original = good.read_bytes()
    rng = random.Random(28)
    counts = {"accepted": 0, "refused": 0, "unsealable": 0}
    loads = 0
    for i in range(300):
        data = bytearray(original)
        if not _mutate(data, rng.choice(headers), rng):
            continue
        path = tmp_path / f"fuzz-{i}.tar"
        path.write_bytes(bytes(data))
        with pytest.raises(modpack.FormatError):
            check_tar_seal(path)
        try:
            seal_tar(path)  # what anyone can do: the seal over whatever the archive now holds
        except Exception:  # tarfile cannot read it back to seal it: the readers were covered
            counts["unsealable"] += 1
            path.unlink()
            continue
        for reader in (check_tar_seal, find_tar_blob):
            try:
                reader(path)
            except modpack.ModpackError:
                pass
        verdict = check_file(path)
        assert verdict.ok or isinstance(verdict.error, modpack.ModpackError), verdict
        counts["accepted" if verdict.ok else "refused"] += 1
        if verdict.ok and loads < 10:
            loads += 1
            assert modpack.load_module(path)["add_int"](2, 3) == 5
        elif not verdict.ok:  # refused before anything is linked: cheap
            with pytest.raises(modpack.ModpackError):
                modpack.load_module(path)
        path.unlink()
    assert counts["refused"] > 50 and counts["accepted"] > 0, counts
