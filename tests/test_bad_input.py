"""Every class of bad input raises a clear FormatError (or a subclass) and never crashes."""

from __future__ import annotations

import itertools
import random
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xxhash
from blobtools import blob_extent, layout, parse, read_blob, reseal, write_blob
from conftest import VADD_C, run_python

import modpack


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("good")
    host = modpack.csource_module(VADD_C)
    a = modpack.const_module({"a": np.arange(1024, dtype=np.float32)})
    b = modpack.const_module({"b": np.arange(10, dtype=np.int64)})
    host.import_module(a)
    a.import_module(b)
    return host.export_library(tmp / "good.so")


@pytest.fixture
def copy(good, tmp_path):
    counter = iter(range(1000))

    def make(name: str | None = None):
        target = tmp_path / f"{name or 'bad'}{next(counter)}.so"
        shutil.copy(good, target)
        return target

    return make


def load_error(path) -> modpack.ModpackError:
    with pytest.raises(modpack.ModpackError) as info:
        modpack.load_module(path)
    return info.value


def test_good_blob_parses(good):
    assert parse(read_blob(good)) is None


@pytest.mark.parametrize("keep", [0, 100, 0.5, "in-blob"])
def test_truncated_file(copy, keep):
    path = copy()
    data = path.read_bytes()
    if keep == "in-blob":
        offset, size = blob_extent(path)
        n = offset + size // 2
    elif isinstance(keep, float):
        n = int(len(data) * keep)
    elif keep == -1:
        n = len(data) - 1
    else:
        n = keep
    path.write_bytes(data[:n])
    err = load_error(path)
    assert isinstance(err, modpack.FormatError)
    assert "truncated" in str(err) or "not an ELF" in str(err)


def test_a_file_cut_short_after_its_loaded_part_still_loads(copy):
    """A library ends with what no loader reads (section headers, .symtab, the trailer that
    tells older readers its seal's version): losing some of it loses nothing."""
    path = copy()
    data = path.read_bytes()
    path.write_bytes(data[:-1])
    assert modpack.load_module(path)["add_int"](2, 3) == 5


def test_truncated_file_in_fresh_process_does_not_crash(copy):
    path = copy()
    offset, _ = blob_extent(path)
    path.write_bytes(path.read_bytes()[: offset + 100])
    out = run_python(
        "import sys, modpack\n"
        "try:\n    modpack.load_module(sys.argv[1])\n"
        "except modpack.FormatError as e:\n    print('FormatError', e)\n",
        str(path),
    )
    assert out.startswith("FormatError")


def test_not_a_library(tmp_path):
    path = tmp_path / "junk.so"
    path.write_bytes(b"\x00" * 4096)
    assert "was not made by modpack: it is not a shared library (4096 bytes, no ELF header) " \
        "and carries no modpack seal" in str(load_error(path))
    with pytest.raises(modpack.FormatError, match="not an ELF"):
        modpack.load_module(path, allow_unsealed=True)


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "modpack", *map(str, args)],
                          capture_output=True, text=True)


def not_ours(message: str) -> bool:
    """Whether |message| says the file was not made by modpack, without calling it damaged or
    suggesting a load without the check (which would only dlopen a stranger's file)."""
    return ("was not made by modpack" in message and "allow_unsealed" not in message
            and "damaged" not in message)


def test_a_text_file_is_said_not_to_be_made_by_modpack(tmp_path):
    """A text file given to load_module was "damaged or truncated ... load it with
    allow_unsealed=True": it is said to be no shared library, and not modpack's; load_module,
    load_module_from_bytes and inspect say so alike."""
    path = tmp_path / "notes.txt"
    path.write_text("a text file, not a library\n")
    message = str(load_error(path))
    assert not_ours(message) and "not a shared library" in message, message
    with pytest.raises(modpack.FormatError) as caught:
        modpack.load_module_from_bytes(path.read_bytes())
    assert not_ours(str(caught.value)), caught.value
    shown = cli("inspect", path)
    assert shown.returncode == 1 and not_ours(shown.stderr), shown.stderr
    assert "not an ELF file" in shown.stderr


def test_another_tools_library_is_said_not_to_be_made_by_modpack(tmp_path):
    """A shared library another tool built (a C compiler's, the system's zlib) was "damaged
    or truncated", with allow_unsealed=True offered, which then dlopened it: it is said to be
    not modpack's, naming what it lacks; inspect reports it with no producer and exits 1 (a
    load refuses it anywhere)."""
    source = tmp_path / "f.c"
    source.write_text("int f(void) { return 1; }\n")
    foreign = tmp_path / "libforeign.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", foreign, source], check=True)
    system = [p for p in (Path("/usr/lib/x86_64-linux-gnu/libz.so.1"),
                          Path("/lib/x86_64-linux-gnu/libz.so.1")) if p.exists()]
    libraries = [foreign, *system[:1]]
    for path in libraries:
        message = str(load_error(path))
        assert not_ours(message), message
        assert "no modpack seal, no blob (__dev_mblob) and no modpack symbols" in message
        with pytest.raises(modpack.FormatError) as caught:
            modpack.load_module_from_bytes(path.read_bytes())
        assert not_ours(str(caught.value)), caught.value
    from modpack.tools.inspection import inspect_library

    report = inspect_library(foreign)
    assert report["producer"] is None and report["blob"] is None and not report["loads"]["ok"]
    shown = cli("inspect", foreign)
    assert shown.returncode == 1 and not_ours(shown.stderr), shown.stderr
    assert "producer           not modpack" in shown.stdout


def test_a_stripped_export_is_still_offered_allow_unsealed(copy):
    """The one unsealed file that allow_unsealed is for: modpack's export, its seal note
    dropped by a tool. Its message says so, and the load without the check takes it."""
    path = copy()
    subprocess.run(["objcopy", "-R", ".note.modpack", path], check=True)
    message = str(load_error(path))
    assert "though modpack's export made it" in message and "allow_unsealed=True" in message
    assert "was not made by modpack" not in message
    assert modpack.load_module(path, allow_unsealed=True)["add_int"](2, 3) == 5


def test_a_tar_archive_modpack_did_not_make(tmp_path):
    """A .tar holding no object file is not a .tar export: said so, with no allow_unsealed."""
    import tarfile

    notes = tmp_path / "notes.txt"
    notes.write_text("hello\n")
    path = tmp_path / "notes.tar"
    with tarfile.open(path, "w") as tar:
        tar.add(notes, arcname="notes.txt")
    message = str(load_error(path))
    assert "was not made by modpack" in message and "allow_unsealed" not in message, message


def test_a_weight_file_is_named_as_one_before_dlopen(tmp_path):
    """A weight file (.mpw) given to load_module reached dlopen ("invalid ELF header"): the
    runtime's check before dlopen names it and says how to open it, for every load (unsealed
    and from bytes too), from C alike."""
    from modpack.runtime.binding import ffi, lib

    path = modpack.save_weights({"w": np.arange(8, dtype=np.float32)}, tmp_path / "model.mpw")
    message = (r"'.*model.mpw' is a modpack weight file \(.mpw\), not a library: open it with "
               r"modpack.load_weights\(path\) \(C: mp_weights_load\), or load the library that "
               r"refers to it with weights=")
    for options in ({}, {"allow_unsealed": True}):
        with pytest.raises(modpack.FormatError, match=message):
            modpack.load_module(path, **options)
    with pytest.raises(modpack.FormatError, match="is a modpack weight file"):
        modpack.load_module_from_bytes(path.read_bytes())
    out = ffi.new("mp_module_t**")
    assert lib.mp_module_load_from_file(str(path).encode(), 0, out) == lib.MP_ERR_FORMAT
    assert "is a modpack weight file (.mpw), not a library" in \
        ffi.string(lib.mp_error_message()).decode()
    assert modpack.load_weights(path)["w"][3] == 3.0


@pytest.mark.parametrize("has_blob", [False, True])
def test_a_seal_and_a_blob_symbol_that_disagree_are_named(tmp_path, has_blob):
    """A sealed library whose seal says it has no blob and defines __dev_mblob (or the other
    way round): the message reads "has no blob" / "has a blob" (it read "has no a blob")."""
    import subprocess

    from modpack.format.seal import write_seal

    source = tmp_path / "lib.c"
    source.write_text("int f(void) { return 1; }\n" if has_blob else
                      "const unsigned char __dev_mblob[64] = {1};\n")
    library = tmp_path / "lib.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", library, source], check=True)
    with open(library, "r+b") as f:
        write_seal(f, blob_size=64 if has_blob else 0)
    expected = ("its seal says it has a blob, but __dev_mblob is not found" if has_blob else
                "its seal says it has no blob, but __dev_mblob is defined")
    with pytest.raises(modpack.FormatError, match=f"lib.so' is damaged: {expected}$"):
        modpack.load_module(library)


def test_damage_is_caught_by_the_seal_before_dlopen(copy):
    """A changed index byte, without a writer's help: the seal refuses the file."""
    path = copy()
    blob = read_blob(path)
    blob[layout(blob)["entries"] + 8] ^= 0x10
    write_blob(path, blob, seal=False)
    err = load_error(path)
    assert isinstance(err, modpack.FormatError) and "do not match its seal" in str(err)
    with pytest.raises(modpack.FormatError, match="do not match its seal"):
        modpack.load_module(path, allow_unsealed=True)  # a damaged seal is never skipped


def test_bad_magic(copy):
    path = copy()
    blob = read_blob(path)
    blob[0] ^= 0xFF
    write_blob(path, blob)
    err = load_error(path)
    assert isinstance(err, modpack.FormatError) and "bad magic" in str(err)


def test_flipped_header_byte(copy):
    path = copy()
    blob = read_blob(path)
    blob[40] ^= 0x01  # edge_count
    write_blob(path, blob)
    err = load_error(path)
    assert isinstance(err, modpack.FormatError) and "index checksum mismatch" in str(err)


def test_flipped_index_byte(copy):
    path = copy()
    blob = read_blob(path)
    blob[layout(blob)["entries"] + 8] ^= 0x10  # a payload size
    write_blob(path, blob)
    assert "index checksum mismatch" in str(load_error(path))


def test_flipped_payload_byte(copy):
    path = copy()
    blob = read_blob(path)
    blob[-3] ^= 0x40
    write_blob(path, blob)
    err = load_error(path)
    assert isinstance(err, modpack.FormatError)
    assert "payload checksum mismatch" in str(err) and "const" in str(err)


def test_damaged_padding_between_payloads(tmp_path):
    """Alignment padding lies outside the seal and every payload checksum: it must be zero."""
    host = modpack.csource_module(VADD_C)
    for i in (1, 2):  # odd-sized payloads, each followed by padding to the next
        host.import_module(modpack.const_module({f"c{i}": np.arange(3 * i, dtype=np.int8)}))
    path = host.export_library(tmp_path / "padded.so")
    blob = read_blob(path)
    entries = layout(blob)["entries"]
    ranges = sorted(struct.unpack_from("<QQ", blob, entries + 48 * i)
                    for i in range(layout(blob)["n"]))
    gaps = [(a + n, b) for (a, n), (b, _) in itertools.pairwise(ranges) if a and b > a + n]
    assert gaps, "the test tree must have padding between payloads"
    blob[gaps[0][0]] = 0x5A
    write_blob(path, blob)
    err = load_error(path)
    assert isinstance(err, modpack.FormatError) and "padding between payloads" in str(err)
    modpack.load_module(path, verify_checksums=False)  # the opt-out skips it, as the payloads


def test_payload_checksums_can_be_skipped(copy):
    path = copy()
    blob = read_blob(path)
    blob[-3] ^= 0x40  # inside the last array's data
    write_blob(path, blob)
    root = modpack.load_module(path, verify_checksums=False)
    assert root.imported_modules[0].imported_modules[0].type_key == "const"


def test_newer_major_version(copy):
    path = copy()
    blob = read_blob(path)
    struct.pack_into("<HH", blob, 8, 2, 0)
    write_blob(path, reseal(blob))
    err = load_error(path)
    assert isinstance(err, modpack.IncompatibleError) and isinstance(err, modpack.FormatError)
    assert "2.0" in str(err) and "upgrade modpack" in str(err)


def test_unknown_flags(good):
    blob = read_blob(good)
    struct.pack_into("<I", blob, 28, 0x80000001)
    assert isinstance(parse(reseal(blob)), modpack.IncompatibleError)


def set_tree(blob: bytearray, row_ptr: list[int] | None = None, children: list[int] | None = None):
    lay = layout(blob)
    for i, v in enumerate(row_ptr or []):
        struct.pack_into("<Q", blob, lay["row_ptr"] + 8 * i, v)
    for i, v in enumerate(children or []):
        struct.pack_into("<Q", blob, lay["children"] + 8 * i, v)
    return reseal(blob)


@pytest.mark.parametrize(
    ("row_ptr", "children", "message"),
    [
        ([1], None, "row_ptr[0]"),
        ([0, 2, 1], None, "not monotone"),
        ([0, 1, 1, 1], None, "ends at 1 but there are 2"),
        (None, [1, 7], "out of range"),
        (None, [1, 0], "cycle"),
        (None, [2, 2], "not reachable"),
        (None, [1, 1], "cycle"),
    ],
)
def test_bad_import_tree(copy, row_ptr, children, message):
    path = copy()
    blob = read_blob(path)
    assert layout(blob)["n"] == 3  # _lib -> a -> b: row_ptr [0, 1, 2, 2], children [1, 2]
    write_blob(path, set_tree(blob, row_ptr, children))
    err = load_error(path)
    assert isinstance(err, modpack.FormatError) and message in str(err), str(err)


def test_payload_out_of_bounds(good):
    blob = read_blob(good)
    entry = layout(blob)["entries"] + 48 * 1
    struct.pack_into("<Q", blob, entry + 8, 1 << 62)
    err = parse(reseal(blob))
    assert isinstance(err, modpack.FormatError) and "outside the payload area" in str(err)


def test_huge_counts_do_not_allocate(good):
    blob = read_blob(good)
    struct.pack_into("<Q", blob, 32, 1 << 60)
    err = parse(reseal(blob))
    assert isinstance(err, modpack.FormatError) and "do not fit" in str(err)


def test_unknown_type_key_names_key_and_loaders(copy):
    path = copy()
    blob = read_blob(path)
    strings = layout(blob)["strings"]
    key_at = blob.index(b"const", strings)
    blob[key_at : key_at + 5] = b"cuda9"
    write_blob(path, reseal(blob))
    err = load_error(path)
    assert isinstance(err, modpack.NotFoundError)
    assert "'cuda9'" in str(err) and "registered loaders: const" in str(err)


def test_const_payload_damage_is_reported(good, tmp_path):
    blob = read_blob(good)
    entry = layout(blob)["entries"] + 48 * 1
    offset = struct.unpack_from("<Q", blob, entry)[0]
    struct.pack_into("<I", blob, offset, 9)  # const payload version
    # Fix the payload checksum so the const loader itself sees the damage.
    import xxhash

    size = struct.unpack_from("<Q", blob, entry + 8)[0]
    digest = xxhash.xxh3_64_intdigest(bytes(blob[offset : offset + size]))
    struct.pack_into("<Q", blob, entry + 16, digest)
    assert parse(reseal(blob)) is None  # structurally fine: the const loader must catch it
    path = tmp_path / "const.so"
    shutil.copy(good, path)
    write_blob(path, blob)
    err = load_error(path)
    assert isinstance(err, modpack.IncompatibleError) and "const payload version 9" in str(err)


def test_random_bit_flips_never_crash(good):
    """Single-bit flips anywhere in the blob: all caught by the checksums."""
    blob = read_blob(good)
    rng = random.Random(0)
    for _ in range(300):
        damaged = bytearray(blob)
        bit = rng.randrange(len(damaged) * 8)
        damaged[bit // 8] ^= 1 << (bit % 8)
        err = parse(damaged)
        assert isinstance(err, modpack.FormatError), f"flip of bit {bit} was not detected"


def test_const_records_must_have_a_valid_width(tmp_path):
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"h": np.zeros(32, np.float16)}))
    path = host.export_library(tmp_path / "bits.so")
    blob = read_blob(path)
    entry = layout(blob)["entries"] + 48
    offset, size = struct.unpack_from("<QQ", blob, entry)
    record = offset + 16
    blob[record + 12] = 4  # code: bfloat, keeping 16 bits -> valid; now claim 8 bits
    blob[record + 13] = 8
    digest = xxhash.xxh3_64_intdigest(bytes(blob[offset : offset + size]))
    struct.pack_into("<Q", blob, entry + 16, digest)
    write_blob(path, reseal(blob))
    with pytest.raises(modpack.FormatError, match="invalid dtype"):
        modpack.load_module(path)


def test_huge_arrays_are_refused():
    with pytest.raises(modpack.ArgumentError, match="too large"):
        modpack.empty((2**63 - 1,), "int16")


def _library_with_names(tmp_path, names):
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({n: np.arange(3, dtype=np.int32) for n in names}))
    return host.export_library(tmp_path / "names.so")


def _rename(path, old: bytes, new: bytes) -> None:
    """Replace the array name |old| by |new| (same length) in the library's blob, resealed."""
    blob = read_blob(path)
    at = blob.rindex(old)
    blob[at : at + len(old)] = new
    write_blob(path, blob)


def test_array_names_that_are_not_utf8_are_refused(tmp_path):
    path = _library_with_names(tmp_path, ["weights_xyz"])
    _rename(path, b"weights_xyz", b"weights_\xff\xfe\xfd")
    with pytest.raises(modpack.FormatError, match="name is not UTF-8"):
        modpack.load_module(path, verify_checksums=False)


def test_two_arrays_of_one_name_are_refused(tmp_path):
    path = _library_with_names(tmp_path, ["first_name", "other_name"])
    _rename(path, b"other_name", b"first_name")
    with pytest.raises(modpack.FormatError, match="two arrays are named 'first_name'"):
        modpack.load_module(path, verify_checksums=False)


def test_array_names_and_ranks_are_checked_at_export():
    with pytest.raises(ValueError, match="UTF-8 without NUL"):
        modpack.const_module({"bad\udcff": np.zeros(1)})
    with pytest.raises(ValueError, match="UTF-8 without NUL"):
        modpack.const_module({"a\0b": np.zeros(1)})
    with pytest.raises(ValueError, match="40 dimensions"):
        modpack.const_module({"deep": np.zeros((1,) * 40)})


def test_an_array_changed_after_const_module_fails_the_export(tmp_path):
    weights = np.zeros(16, dtype=np.float32)
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": weights}))
    weights[3] = 1.0
    with pytest.raises(modpack.ModpackError, match="'w' changed after const_module"):
        host.export_library(tmp_path / "changed.so")
    assert not (tmp_path / "changed.so").exists()


def test_nul_in_a_function_name_or_a_str_argument_is_refused(good):
    root = modpack.load_module(good)
    with pytest.raises(modpack.ArgumentError, match="NUL"):
        root["add_int\x00junk"]
    with pytest.raises(modpack.ArgumentError):
        root["add_int"]("4\x00", 1)


def test_nested_payload_ranges_are_refused(tmp_path):
    """Payloads are disjoint and in index order (or shared whole): a range inside another is
    refused, which keeps validation linear in the file."""
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"a": np.arange(256, dtype=np.float32)}))
    host.import_module(modpack.const_module({"b": np.arange(8, dtype=np.float32)}))
    blob = read_blob(host.export_library(tmp_path / "nested.so"))
    at = layout(blob)["entries"]
    entries = [list(struct.unpack_from("<QQQ", blob, at + 48 * i)) for i in range(3)]
    first, second = entries[1][0], entries[2][0]
    assert second > first + 64
    struct.pack_into("<QQ", blob, at + 48 * 2, first + 64, 64)  # inside the first payload
    err = parse(reseal(blob))
    assert isinstance(err, modpack.FormatError) and "overlaps an earlier payload" in str(err)


# ---- sparse files: gigabytes claimed, kilobytes stored ------------------------------------------

SPARSE_GIB = 8


def sparse_weight_file(folder, checksum_right: bool):
    """A weight file of one float32 array claiming 8 GiB, every size consistent, whose data is
    one hole: a few kilobytes on disk. Its XXH3 checksum and SHA-256 digest are those of 8 GiB
    of zeros (|checksum_right|), so that it is valid, or its checksum is off by one, so that
    only reading all of it can refuse it. The valid one is signed (a weight file signs its
    index, which holds the digest; signing keeps the hole)."""
    import hashlib

    from test_signing import write_key

    from modpack.format.seal import write_seal
    from modpack.format.signatures import sign_library

    path = modpack.save_weights({"w": np.zeros(2048, np.float32)}, folder / "sparse.mpw")
    data = bytearray(path.read_bytes())
    index_size, _, data_offset = struct.unpack_from("<QQQ", data, 16)
    size = SPARSE_GIB << 30
    zeros = bytes(1 << 22)
    checksum = xxhash.xxh3_64()
    for _ in range(size // len(zeros)):
        checksum.update(zeros)
    inner = hashlib.sha256(zeros).digest() * (size // len(zeros))
    record = 64
    shape_offset = struct.unpack_from("<Q", data, record + 24)[0]
    struct.pack_into("<Q", data, shape_offset, size // 4)
    struct.pack_into("<QQ", data, record + 40, size, checksum.intdigest() + (not checksum_right))
    data[record + 56:record + 88] = hashlib.sha256(inner).digest()
    struct.pack_into("<Q", data, 40, size)  # the header's data_size
    struct.pack_into("<Q", data, 56, 0)
    struct.pack_into("<Q", data, 56, xxhash.xxh3_64_intdigest(bytes(data[:index_size])))
    with open(path, "r+b") as f:
        f.truncate(0)
        f.write(bytes(data[:data_offset]))
        f.truncate(data_offset + size)  # the data: one hole
        write_seal(f, blob_size=data_offset + size, payloads_offset=data_offset,
                   payloads_size=size)
    key = write_key(folder, "signer")
    if checksum_right:  # signing checks the file first
        sign_library(path, key[0])
    assert path.stat().st_blocks * 512 < 1 << 20  # under 1 MiB on disk, signed too
    return path, key[1]


def resident_kib(path) -> int:
    """This process's resident KiB of its mappings of |path| (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as smaps:
        for line in smaps:
            if "-" in line.split()[0] and len(line.split()) >= 5:
                inside = line.rstrip().endswith(str(path))
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


def test_a_sparse_weight_file_is_checked_without_reading_its_holes(tmp_path):
    """8 GiB of holes are checked as the zeros they read as, without reading them (reading
    them would fill the page cache with 8 GiB of zeroed pages: half a minute once): the valid
    file loads with its checksums and, signed, its digests, and the mapping stays nearly
    unread; the one whose checksum is off is refused, naming the array."""
    path, public = sparse_weight_file(tmp_path, checksum_right=True)
    weights = modpack.load_weights(path)
    assert weights["w"].shape == ((SPARSE_GIB << 30) // 4,)
    assert resident_kib(path) < 1024, resident_kib(path)
    signed = modpack.load_weights(path, trusted_keys=[public])  # every digest checked
    assert resident_kib(path) < 1024, resident_kib(path)
    del weights, signed
    (tmp_path / "bad").mkdir()
    bad, _ = sparse_weight_file(tmp_path / "bad", checksum_right=False)
    with pytest.raises(modpack.FormatError, match="array 'w' does not match its checksum"):
        modpack.load_weights(bad)
    proc = subprocess.run([sys.executable, "-m", "modpack", "verify", str(bad)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "does not match its checksum" in proc.stdout + proc.stderr


def test_a_sparse_library_is_checked_without_reading_its_holes(tmp_path):
    """A library whose weights are holes (copied with ``cp --sparse=always``, which makes a hole
    of every run of zeros) loads, signed or not, and verifies, without reading its holes: a
    load checks each payload's XXH3, a signed load hashes everything with SHA-256, and neither
    faults in the 64 MiB of zeros."""
    from test_signing import write_key

    from modpack.format.signatures import sign_library

    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"zeros": np.zeros(16 << 20, np.float32)}))
    dense = host.export_library(tmp_path / "dense.so")
    path = tmp_path / "sparse.so"
    subprocess.run(["cp", "--sparse=always", str(dense), str(path)], check=True)
    key = write_key(tmp_path, "signer")
    sign_library(path, key[0])  # signed in its note, in place of a copy that keeps the holes
    assert path.stat().st_blocks * 512 < 1 << 20, path.stat().st_blocks
    for trusted in (None, [key[1]]):
        root = modpack.load_module(path, trusted_keys=trusted)
        assert resident_kib(path) < 2048, (trusted, resident_kib(path))
        assert root.imported_modules[0].arrays["zeros"][-1] == 0
        del root
    proc = subprocess.run([sys.executable, "-m", "modpack", "verify", str(path), "--key",
                           str(key[1])], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
