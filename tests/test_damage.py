"""The damage campaign: copies of exported libraries (as exported, and stripped as packagers
strip them) and archives, damaged the ways disks, downloads and careless tools damage files
(truncated, bits flipped in every region of the ELF file, ranges zeroed, tar headers and members
broken), each loaded in a child process. No crash, no hang. Every copy whose damage reaches what
a load reads (what the seal covers, the payloads) must be refused with a FormatError, never
loaded (a load would run damaged code, or come back with its modules gone); damage to what no
load reads (section headers, .symtab, the trailer) may load, and then loads the whole tree and
runs. inspect, verify and extract give the loader's verdict every time; slim refuses what a load
refuses and slims or refuses (FormatError) the rest. The short campaign always runs; the long
one, over every linker and thousands of copies, is marked slow."""

from __future__ import annotations

import os
import queue
import random
import shutil
import subprocess
import sys
import tarfile
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from blobtools import covered
from conftest import VADD_C
from elftools.elf.elffile import ELFFile

import modpack
from modpack.format.seal import SEAL_SIZE, check_seal

HANG_SECONDS = 30  # no load of a small damaged file takes this long

# Loads each file named on stdin in turn, one line per outcome, flushed before the next
# file: the parent sees which file a crash or a hang happened on.
WORKER = r"""
import os, shutil, sys, tempfile, modpack
from modpack.tools.extraction import extract_library
from modpack.tools.inspection import inspect_library
from modpack.tools.slim import slim_library

def slim(path):
    # A slimmed copy that loads whole and calls, or a refusal.
    out = folder + "/slim" + os.path.splitext(path)[1]
    slim_library(path, out, "sm_90")
    try:
        root = modpack.load_module(out)
        return len(root.imported_modules) > 0 and root["add_int"](2, 3) == 5 or "broken"
    finally:
        os.unlink(out)

def tool_verdicts(path):
    # What inspect, verify, extract and slim say of the file: each must refuse what a load
    # refuses (slim may refuse more: a copy whose section headers are damaged).
    said = []
    for name, run in (("inspect", lambda: (inspect_library(path)["loads"] or {}).get("ok")),
                      ("verify", lambda: modpack.verify_library(path)["ok"]),
                      ("extract", lambda: bool(extract_library(path, folder + "/out"))),
                      ("slim", lambda: slim(path))):
        try:
            ok = run()
        except modpack.ModpackError:
            ok = False
        except Exception as exc:
            ok = type(exc).__name__
        said.append(f"{name}={'accepted' if ok is True else 'refused' if ok is False else ok}")
        shutil.rmtree(folder + "/out", ignore_errors=True)
    return ",".join(said)

folder = tempfile.mkdtemp()
for line in sys.stdin:
    index, path = line.rstrip("\n").split(" ", 1)
    print("begin", index, flush=True)
    try:
        root = modpack.load_module(path)
    except modpack.FormatError as exc:
        print("refused", index, tool_verdicts(path), str(exc).splitlines()[0][:300], flush=True)
    except Exception as exc:
        print("other", index, type(exc).__name__, str(exc).splitlines()[0][:300], flush=True)
    else:
        calls = root["add_int"](2, 3) == 5
        print("loaded", index, tool_verdicts(path), len(root.imported_modules), calls, flush=True)
        del root
"""


@dataclass(frozen=True)
class Damage:
    """One damaged copy: what was done, to which region of which original, and whether it
    reaches what every load checks (else it may load, whole). The copy is a recipe (|source|'s
    bytes with |edit| applied) written to |path| only while its batch runs: the long campaign's
    thousands of copies of megabyte files would otherwise fill a CI machine's disk."""

    original: str
    region: str
    what: str
    path: Path
    caught: bool = True
    modules: str = ""  # how many modules the original's root imports
    source: Path = Path()
    edit: tuple[str, int, int] = ("cut", 0, 0)  # (flip, at, bit), (zero, at, length), (cut, at, 0)

    def content(self, data: bytes) -> bytes:
        """The damaged copy of |data| (the bytes of |source|)."""
        kind, at, arg = self.edit
        if kind == "flip":
            copy = bytearray(data)
            copy[at] ^= 1 << arg
            return bytes(copy)
        if kind == "zero":
            return data[:at] + bytes(arg) + data[at + arg :]
        return data[:at]


@dataclass
class Outcome:
    damage: Damage
    result: str  # refused, other, loaded, crash, hang
    detail: str = ""


def elf_regions(path: Path) -> list[tuple[str, int, int]]:
    """(name, begin, end) of every part of the library's file: headers, each section with
    bytes in the file, the blob's index and payloads, the seal, and the bytes between them."""
    size = path.stat().st_size
    regions: list[tuple[str, int, int]] = []
    with open(path, "rb") as f:
        elf = ELFFile(f)
        regions.append(("ELF header", 0, elf["e_ehsize"]))
        start = elf["e_phoff"]
        regions.append(("program headers", start, start + elf["e_phnum"] * elf["e_phentsize"]))
        start = elf["e_shoff"]
        regions.append(("section headers", start, start + elf["e_shnum"] * elf["e_shentsize"]))
        for section in elf.iter_sections():
            if section["sh_type"] != "SHT_NOBITS" and section["sh_size"] and section.name:
                begin = section["sh_offset"]
                regions.append((section.name, begin, begin + section["sh_size"]))
    # Where the blob and its payloads lie, as the seal records it.
    seal = check_seal(path)
    if seal.blob_offset:
        regions.append(("blob index", seal.blob_offset, seal.payloads_offset))
        regions.append(("payloads", seal.payloads_offset,
                        seal.payloads_offset + seal.payloads_size))
    regions.append(("trailer", size - SEAL_SIZE, size))
    # The blob's section is covered by the blob's own regions.
    regions = [r for r in regions if r[0] != ".modpack.blob" and r[1] < r[2] <= size]
    covered = np.zeros(size, dtype=bool)
    for _, begin, end in regions:
        covered[begin:end] = True
    edges = np.flatnonzero(np.diff(np.concatenate(([0], (~covered).view(np.int8), [0]))))
    for begin, end in zip(edges[::2], edges[1::2], strict=True):
        regions.append(("between regions", int(begin), int(end)))
    return regions


def tar_regions(path: Path) -> list[tuple[str, int, int]]:
    """(name, begin, end) of each member's header and data (with its padding to tar's 512-byte
    blocks), and tar's end blocks."""
    regions = []
    with tarfile.open(path) as tar:
        members = tar.getmembers()
    end = 0
    for m in members:
        regions.append((f"{m.name} header", m.offset, m.offset_data))
        end = m.offset_data + -(-m.size // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
        if m.size:
            regions.append((f"{m.name} data", m.offset_data, end))
    regions.append(("end blocks", end, path.stat().st_size))
    return regions


def damage(original: Path, regions: list[tuple[str, int, int]], out: Path, rng: random.Random,
           flips: int, truncations: int, modules: int = 0) -> list[Damage]:
    """Damaged copies of |original| in |out|: in each region |flips| single-bit flips, one
    zeroed range and a truncation at its start; plus |truncations| at random offsets."""
    data = original.read_bytes()
    made: list[Damage] = []
    # What every load checks (a .tar's seal member covers every byte of it).
    checked = covered(original) if original.suffix == ".so" else np.ones(len(data), dtype=bool)
    # Truncated at |at|: whether a checked byte is lost.
    cut = np.concatenate((np.cumsum(checked[::-1])[::-1] > 0, [False]))

    def write(region: str, what: str, edit: tuple[str, int, int], caught: bool) -> None:
        path = out / f"{original.stem}-{len(made)}{original.suffix}"
        made.append(Damage(original.name, region, what, path, bool(caught), str(modules),
                           original, edit))

    for name, begin, end in regions:
        for _ in range(flips):
            at, bit = rng.randrange(begin, end), rng.randrange(8)
            write(name, f"bit {bit} of byte {at} flipped", ("flip", at, bit), checked[at])
        at = rng.randrange(begin, end)
        length = min(rng.choice((1, 8, 64, 4096)), end - at)
        changed = np.frombuffer(data[at : at + length], dtype=np.uint8) != 0
        if changed.any():
            write(name, f"{length} bytes zeroed at {at}", ("zero", at, length),
                  (checked[at : at + length] & changed).any())
        write(name, f"truncated at {begin}", ("cut", begin, 0), cut[begin])
    for _ in range(truncations):
        at = rng.randrange(len(data))
        write("anywhere", f"truncated at {at}", ("cut", at, 0), cut[at])
    return made


BATCH = 250  # damaged copies on disk per batch: a few hundred MiB at most


def run_campaign(damages: list[Damage]) -> list[Outcome]:
    """Load every damaged copy in child processes, batches side by side on the machine's
    cores: each batch's copies are written before it runs and removed after, so the disk holds
    only the batches running."""
    originals = {d.source: d.source.read_bytes() for d in damages}

    def run(batch: list[Damage]) -> list[Outcome]:
        for d in batch:
            d.path.write_bytes(d.content(originals[d.source]))
        try:
            return run_batch(batch)
        finally:
            for d in batch:
                d.path.unlink(missing_ok=True)

    batches = [damages[i : i + BATCH] for i in range(0, len(damages), BATCH)]
    with ThreadPoolExecutor(max(1, min(len(batches), os.cpu_count() or 1))) as pool:
        return [o for outcomes in pool.map(run, batches) for o in outcomes]


def run_batch(damages: list[Damage]) -> list[Outcome]:
    """Load every damaged copy in child processes; a crash or a hang is recorded against the
    copy being loaded, and a new child goes on with the next one."""
    outcomes: dict[int, Outcome] = {}
    next_index = 0
    while next_index < len(damages):
        proc = subprocess.Popen([sys.executable, "-c", WORKER], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        lines: queue.Queue[str | None] = queue.Queue()

        def pump(stream=proc.stdout, sink=lines) -> None:
            for line in stream:
                sink.put(line)
            sink.put(None)

        threading.Thread(target=pump, daemon=True).start()
        feed = "".join(f"{i} {damages[i].path}\n" for i in range(next_index, len(damages)))
        threading.Thread(target=_feed, args=(proc, feed), daemon=True).start()
        current = None
        while True:
            try:
                line = lines.get(timeout=HANG_SECONDS)
            except queue.Empty:
                proc.kill()
                outcomes[current] = Outcome(damages[current], "hang")
                break
            if line is None:  # the child ended: finished, or died on |current|
                code = proc.wait()
                if current is not None and current not in outcomes:
                    outcomes[current] = Outcome(damages[current], "crash", f"exit {code}")
                break
            word, index, *rest = line.rstrip("\n").split(" ", 2)
            current = int(index)
            if word != "begin":
                outcomes[current] = Outcome(damages[current], word, " ".join(rest))
        proc.wait()
        next_index = (current + 1) if current is not None else len(damages)
    return [outcomes[i] for i in sorted(outcomes)]


def _feed(proc: subprocess.Popen, text: str) -> None:
    try:
        proc.stdin.write(text)
        proc.stdin.close()
    except (BrokenPipeError, OSError):
        pass  # the child died; the parent starts another


def _wrong(o: Outcome) -> bool:
    """Whether |o| breaks the rules: a copy whose damage every load checks is refused; any
    other is refused or loads whole (its modules all there, a call right); inspect, verify and
    extract say what the loader said (one verdict); slim refuses what the loader refuses, and
    of the rest writes a library that loads whole or refuses with a FormatError (a copy whose
    section headers, which no load reads, are gone), never anything else."""
    tools = dict(t.split("=", 1) for t in o.detail.split(" ")[0].split(",") if "=" in t)
    slim = tools.pop("slim", None)
    if slim not in ("accepted", "refused"):
        return True
    if o.result == "refused":
        return slim != "refused" or set(tools.values()) != {"refused"}
    if o.result == "loaded" and not o.damage.caught:
        return (o.detail.split(" ")[1:] != [o.damage.modules, "True"]
                or set(tools.values()) != {"accepted"} or len(tools) != 3)
    return True


def assert_all_refused(outcomes: list[Outcome], expected: int) -> None:
    """Every copy refused by the loader (or, damaged where no load reads, loaded whole), with
    inspect, verify and extract agreeing."""
    counts = Counter(o.result for o in outcomes)
    bad = [o for o in outcomes if _wrong(o)]
    report = "\n".join(f"  {o.result}: {o.damage.original} {o.damage.region}: "
                       f"{o.damage.what} {o.detail}" for o in bad[:40])
    assert len(outcomes) == expected and not bad, (
        f"{dict(counts)} of {expected} damaged copies:\n{report}")
    # Most of the campaign reaches what loads check; some of it the rest.
    assert counts["refused"] > counts["loaded"] > 0 or expected < 50, dict(counts)


def export_originals(out: Path, linker: str | None = None) -> list[Path]:
    """A host library importing weights and a small tree, as .so and .tar."""
    host = modpack.csource_module(VADD_C)
    weights = modpack.const_module({
        "w": np.linspace(-1, 1, 300_000, dtype=np.float32),  # a payload of more than 1 MiB
        "b": np.arange(16, dtype=np.int64),
    })
    small = modpack.const_module({"s": np.arange(7, dtype=np.int16)})
    host.import_module(weights)
    weights.import_module(small)
    host.import_module(small)
    env = dict(os.environ)
    try:
        if linker:
            os.environ["MODPACK_LINKER"] = linker
        tag = linker or "default"
        made = [host.export_library(out / f"{tag}.so"), host.export_library(out / f"{tag}.tar")]
        # Device code in code frames (format 1.1): damage to the compressed bytes, the frame
        # headers or the flags is refused like damage anywhere else.
        packed = modpack.csource_module(VADD_C)
        packed.import_module(modpack.opencl_module(
            "__kernel void k(__global float* x) { x[get_global_id(0)] *= 2.0f; }\n" * 1
            + "".join(f"// comment line {i} that compresses\n" for i in range(100))))
        packed.import_module(small)
        made.append(packed.export_library(out / f"{tag}-compressed.so", compress_code=True))
    finally:
        os.environ.clear()
        os.environ.update(env)
    if shutil.which("strip"):  # as packagers ship it: its seal kept, what nothing loads gone
        stripped = out / f"{tag}-stripped.so"
        shutil.copyfile(made[0], stripped)
        subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True)
        made.append(stripped)
    return made


def campaign(tmp: Path, seed: int, flips: int, truncations: int,
             linkers: list[str | None]) -> tuple[int, list[Outcome]]:
    rng = random.Random(seed)
    damages: list[Damage] = []
    for linker in linkers:
        for original in export_originals(tmp, linker):
            modules = len(modpack.load_module(original).imported_modules)
            assert modules  # the original is fine
            regions = (tar_regions(original) if original.suffix == ".tar"
                       else elf_regions(original))
            folder = tmp / f"damaged-{original.stem}{original.suffix.replace('.', '-')}"
            folder.mkdir()
            damages += damage(original, regions, folder, rng, flips, truncations, modules)
    return len(damages), run_campaign(damages)


def test_the_regions_cover_the_whole_file(tmp_path):
    """The campaign reaches every byte: the regions of an export tile its file."""
    (so, tar, *_) = export_originals(tmp_path)
    for path, regions in ((so, elf_regions(so)), (tar, tar_regions(tar))):
        covered = np.zeros(path.stat().st_size, dtype=bool)
        for _, begin, end in regions:
            covered[begin:end] = True
        assert covered.all(), f"{path.name}: bytes in no region"
    names = {name for name, _, _ in elf_regions(so)}
    for expected in ("ELF header", "program headers", "section headers", ".dynamic", ".dynsym",
                     ".text", "blob index", "payloads", ".note.modpack", "trailer"):
        assert expected in names


def test_every_damaged_copy_is_refused(tmp_path):
    total, outcomes = campaign(tmp_path, seed=1, flips=5, truncations=40, linkers=[None])
    assert total > 150
    assert_all_refused(outcomes, total)


@pytest.mark.slow
def test_every_damaged_copy_is_refused_long(tmp_path):
    linkers = [name for name, tool in (("bfd", "ld.bfd"), ("gold", "ld.gold"),
                                       ("lld", "ld.lld"), ("mold", "mold")) if shutil.which(tool)]
    total, outcomes = campaign(tmp_path, seed=2, flips=40, truncations=200, linkers=linkers)
    assert total > 4000
    assert_all_refused(outcomes, total)


def test_every_byte_of_the_tar_seal_header_is_covered(tmp_path):
    """The long campaign once found a flip that tar ignores (a leading zero of the header's
    checksum field turned into a space) in the seal member's header, which its own digest cannot
    cover: the reader now requires exactly the header modpack writes."""
    from modpack.format.tar_seal import check_tar_seal

    path = modpack.csource_module(VADD_C).export_library(tmp_path / "t.tar")
    with tarfile.open(path) as tar:
        start = tar.getmembers()[-1].offset
    good = path.read_bytes()
    accepted = []
    for offset in range(start, start + tarfile.BLOCKSIZE):
        for bit in (0x10, 0x01):
            bad = bytearray(good)
            bad[offset] ^= bit
            path.write_bytes(bytes(bad))
            try:
                check_tar_seal(path)
                accepted.append((offset - start, bit))
            except modpack.FormatError:
                pass
    assert not accepted, accepted


def test_the_seal_coverage_writers_ask_is_the_loader_s_and_refuses_bad_input(tmp_path):
    """mp_seal_coverage, which export, sign and slim ask what a seal covers: a sealed library's
    coverage starts at its ELF header and names the note inside it; a file with no seal note
    (text, an ELF object) has none (the writer then uses a trailer); a bad descriptor or NULL
    counts are refused as bad arguments, never read."""
    from modpack.format.coverage import read_coverage
    from modpack.runtime.binding import ffi, lib

    host = modpack.csource_module("int one(void) { return 1; }")
    library = host.export_library(tmp_path / "one.so")
    with open(library, "rb") as f:
        coverage = read_coverage(f)
    assert coverage is not None and coverage.ranges[0][0] == 0
    assert any(b <= coverage.note < e for b, e in coverage.ranges)
    text = tmp_path / "text.so"
    text.write_text("not a library\n")
    with open(text, "rb") as f:
        assert read_coverage(f) is None
    counts = ffi.new("uint64_t[3]")
    assert lib.mp_seal_coverage(-1, ffi.NULL, 0, counts, ffi.NULL, 0, counts + 1, counts + 2) \
        == lib.MP_ERR_INVALID_ARGUMENT
    with open(library, "rb") as f:
        assert lib.mp_seal_coverage(f.fileno(), ffi.NULL, 0, ffi.NULL, ffi.NULL, 0, counts + 1,
                                    counts + 2) == lib.MP_ERR_INVALID_ARGUMENT
        # No room: the counts are still said, nothing written.
        assert lib.mp_seal_coverage(f.fileno(), ffi.NULL, 0, counts, ffi.NULL, 0, counts + 1,
                                    counts + 2) == 0
        assert (counts[0], counts[1], counts[2]) == (len(coverage.ranges), len(coverage.masks),
                                                     coverage.note)
