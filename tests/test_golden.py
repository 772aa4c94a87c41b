"""Golden files: libraries written by earlier modpack versions that the reader must keep
reading. Each folder was exported once with tests/data/golden_v1/make_golden.py and is never
regenerated: if these tests fail, the reader (or the runtime above it) stopped reading what an
earlier modpack wrote, which the compatibility rules forbid.

- golden_v1: format 1.0, linked blob, no seal (modpack 0.1.0 before the seal);
- golden_v1_sealed: format 1.0, the blob placed in a segment of its own, seal version 1, and a
  ``.tar`` with tar seal version 2;
- golden_v2_sealed: format 1.0, the blob placed in a segment of its own, seal version 2 (the
  seal note), made with ``make_golden.py --no-tar``.
"""

from __future__ import annotations

import json
import platform
import re
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import xxhash
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

import modpack
from modpack.format.seal import check_seal
from modpack.runtime.binding import error_from_status, ffi, lib

DATA = Path(__file__).parent / "data"
GOLDEN = DATA / "golden_v1"
SEALED = DATA / "golden_v1_sealed"
SEALED_V2 = DATA / "golden_v2_sealed"
EXPECTED = json.loads((GOLDEN / "expected.json").read_text())
assert json.loads((SEALED / "expected.json").read_text()) == EXPECTED  # one tree, three forms
assert json.loads((SEALED_V2 / "expected.json").read_text()) == EXPECTED
UINT64_MAX = 2**64 - 1

# deploy.so holds x86-64 Linux code; the blob checks below run anywhere.
needs_x86_64 = pytest.mark.skipif(
    platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"),
    reason="the golden library is an x86-64 Linux shared object",
)


def expected_array(spec: dict) -> np.ndarray:
    return np.array(spec["values"], dtype=np.dtype(spec["dtype"])).reshape(spec["shape"])


@needs_x86_64
def test_golden_library_loads_as_recorded():
    # Made before the seal: it loads when asked to load unsealed, and only then.
    with pytest.raises(modpack.FormatError, match="carries no modpack seal"):
        modpack.load_module(GOLDEN / "deploy.so")
    check_tree(modpack.load_module(GOLDEN / "deploy.so", allow_unsealed=True))


@needs_x86_64
@pytest.mark.parametrize("name", ["deploy.so", "deploy.tar"])
def test_sealed_golden_loads_as_recorded(name):
    check_tree(modpack.load_module(SEALED / name))


def test_sealed_golden_seal_says_where_the_blob_is():
    seal = check_seal(SEALED / "deploy.so")
    blob = (SEALED / "devc.bin").read_bytes()
    assert seal.file_size == (SEALED / "deploy.so").stat().st_size
    assert seal.blob_size == len(blob)
    with open(SEALED / "deploy.so", "rb") as f:
        f.seek(seal.blob_offset)
        assert f.read(seal.blob_size) == blob
    assert seal.payloads_offset + seal.payloads_size == seal.blob_offset + seal.blob_size
    assert check_seal(GOLDEN / "deploy.so") is None


def test_a_changed_byte_in_the_sealed_golden_is_refused(tmp_path):
    data = bytearray((SEALED / "deploy.so").read_bytes())
    data[100] ^= 1  # in the program headers
    (tmp_path / "changed.so").write_bytes(bytes(data))
    with pytest.raises(modpack.FormatError, match="do not match its seal"):
        modpack.load_module(tmp_path / "changed.so")


# ---- the version 2 seal, read as docs/format.md ("Version 2: the seal note") says ----------
# Everything below is parsed from the doc's offsets, not with modpack's reader, so that the
# golden file pins the format as documented.

PT_LOAD, PT_NOTE = 1, 4
NOTE_HEADER = struct.pack("<III", 8, 584, 1) + b"modpack\0"  # namesz, descsz, type, name
DESCRIPTOR = struct.Struct("<IIQQQQQQQII512s")  # 584 bytes, fields in the doc's order


def elf_layout(data: bytes) -> tuple[int, list[tuple[int, ...]]]:
    """(e_phoff, program headers as (type, flags, offset, vaddr, paddr, filesz, memsz, align))."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1  # ELF64, little-endian
    phoff, = struct.unpack_from("<Q", data, 32)
    phentsize, phnum = struct.unpack_from("<HH", data, 54)
    assert phentsize == 56 and 0 < phnum < 0xFFFF
    return phoff, [struct.unpack_from("<IIQQQQQQ", data, phoff + 56 * i) for i in range(phnum)]


def find_seal_note(data: bytes) -> int:
    """The file offset of the seal note's descriptor: the first PT_NOTE (of at least 604 bytes)
    holding the note header at a multiple of 4 from its start, read where a PT_LOAD's file bytes
    map it."""
    _, headers = elf_layout(data)
    for type_, _, _, vaddr, _, filesz, _, _ in headers:
        if type_ != PT_NOTE or not 604 <= filesz <= 1 << 20:
            continue
        for ltype, _, loffset, lvaddr, _, lfilesz, _, _ in headers:
            if ltype == PT_LOAD and lvaddr <= vaddr and vaddr + filesz <= lvaddr + lfilesz:
                start = loffset + vaddr - lvaddr
                notes = data[start:start + filesz]
                for at in range(0, filesz - 604 + 1, 4):
                    if notes[at:at + 20] == NOTE_HEADER:
                        return start + at + 20
                break
    raise AssertionError("no seal note")


def note_digest(data: bytes, descriptor: int, payloads: tuple[int, int],
                masked: bool = True) -> int:
    """XXH3-128 of what a version 2 seal covers: the ELF header, the program header table and
    the file bytes of every PT_LOAD, each byte once in file order, the payload range left out,
    the documented fields read as zeros."""
    phoff, headers = elf_layout(data)
    ranges = sorted([(0, 64), (phoff, phoff + 56 * len(headers))] + [
        (h[2], h[2] + h[5]) for h in headers if h[0] == PT_LOAD and h[5] > 0])
    covered = bytearray(data)
    masks = [(40, 8), (58, 6)]  # e_shoff; e_shentsize, e_shnum, e_shstrndx
    for i, h in enumerate(headers):
        masks.append((phoff + 56 * i + 24, 8))  # p_paddr
        if h[0] != PT_LOAD:
            masks.append((phoff + 56 * i + 8, 8))  # p_offset
    masks += [(descriptor + 48, 16), (descriptor + 72, 512)]  # the digest, the slots
    for at, size in masks if masked else []:
        covered[at:at + size] = bytes(size)
    digest, end = xxhash.xxh3_128(), 0
    skip_begin, skip_end = payloads[0], payloads[0] + payloads[1]
    for begin, stop in ranges:
        begin = max(begin, end)  # merged: each byte once
        for b, e in ((begin, min(stop, skip_begin)), (max(begin, skip_end), stop)):
            if b < e:
                digest.update(bytes(covered[b:e]))
        end = max(end, stop)
    return digest.intdigest()


def test_v2_golden_seal_note_is_where_and_what_the_docs_say():
    data = (SEALED_V2 / "deploy.so").read_bytes()
    blob = (SEALED_V2 / "devc.bin").read_bytes()
    d = find_seal_note(data)
    (version, flags, blob_vaddr, blob_size, blob_offset, payloads_offset, payloads_size,
     digest_low, digest_high, slots, reserved, signatures) = DESCRIPTOR.unpack_from(data, d)
    assert (version, flags, slots, reserved) == (2, 0, 4, 0)
    assert signatures == bytes(512)  # unsigned: four free slots
    assert blob_size == len(blob) == EXPECTED["blob_size"]
    assert data[blob_offset:blob_offset + blob_size] == blob
    index_size, = struct.unpack_from("<Q", blob, 48)
    assert payloads_offset == blob_offset + (index_size + 63) // 64 * 64
    assert payloads_offset + payloads_size == blob_offset + blob_size

    # The note lies in the first PT_LOAD; the blob in a read-only PT_LOAD of its own, the last
    # one, at the address the note says; the table kept the linker's entry count.
    _, headers = elf_layout(data)
    loads = [h for h in headers if h[0] == PT_LOAD]
    assert loads[0][2] == 0 and d + 584 <= loads[0][5]
    assert loads[-1][1] == 4 and loads[-1][2] == blob_offset and loads[-1][3] == blob_vaddr
    assert loads[-1][5] == blob_size
    with open(SEALED_V2 / "deploy.so", "rb") as f:
        elf = ELFFile(f)
        slot = elf.get_section_by_name(".note.modpack.slot")
        assert slot is not None and slot["sh_addralign"] == 16
        assert f.seek(slot["sh_offset"]) >= 0 and f.read(20) == struct.pack(
            "<III", 8, 0, 2) + b"modpack\0"  # the slot note, type 2, empty
        assert all(h[3] != slot["sh_addr"] for h in headers if h[0] == PT_NOTE)  # taken

    value = note_digest(data, d, (payloads_offset, payloads_size))
    assert (value & (2**64 - 1), value >> 64) == (digest_low, digest_high)
    assert note_digest(data, d, (payloads_offset, payloads_size), masked=False) != value

    # The trailer: version 1's layout, version 2, the note's fields and digest.
    trailer = struct.unpack_from("<QQQQQQQQII8s", data, len(data) - 80)
    assert trailer == (len(data), blob_offset, blob_vaddr, blob_size, payloads_offset,
                       payloads_size, digest_low, digest_high, 2, 0, b"MPKSEAL\n")

    seal = check_seal(SEALED_V2 / "deploy.so")  # and modpack's reader agrees
    assert (seal.version, seal.blob_offset, seal.blob_vaddr, seal.blob_size,
            seal.payloads_offset, seal.payloads_size) == (
        2, blob_offset, blob_vaddr, blob_size, payloads_offset, payloads_size)


@needs_x86_64
def test_v2_golden_loads_as_recorded():
    check_tree(modpack.load_module(SEALED_V2 / "deploy.so"))


@needs_x86_64
@pytest.mark.skipif(not shutil.which("strip"), reason="needs binutils' strip")
def test_v2_golden_loads_after_strip_unneeded(tmp_path):
    """What Debian's and RPM's packaging runs on every library: the seal note survives it,
    with the same digest, and the library loads sealed and checked."""
    import subprocess

    stripped = tmp_path / "deploy.so"
    shutil.copyfile(SEALED_V2 / "deploy.so", stripped)
    subprocess.run(["strip", "--strip-unneeded", str(stripped)], check=True)
    before, after = (SEALED_V2 / "deploy.so").read_bytes(), stripped.read_bytes()
    assert after != before and after[-8:] != b"MPKSEAL\n"  # rewritten; the trailer dropped
    d = find_seal_note(after)
    assert after[d:d + 584] == before[find_seal_note(before):][:584]
    fields = DESCRIPTOR.unpack_from(after, d)
    value = note_digest(after, d, (fields[5], fields[6]))
    assert (value & (2**64 - 1), value >> 64) == (fields[7], fields[8])
    assert check_seal(stripped).version == 2
    check_tree(modpack.load_module(stripped))


@pytest.mark.parametrize("at, refused", [(64 + 56 + 4, True), (64 + 56 + 24, False)],
                         ids=["covered", "masked"])
def test_a_changed_byte_in_the_v2_golden(tmp_path, at, refused):
    """A changed bit of the first PT_LOAD's p_flags (readable becomes executable) is damage; of
    its p_paddr, which the seal reads as zeros, it is not."""
    data = bytearray((SEALED_V2 / "deploy.so").read_bytes())
    data[at] ^= 1
    (tmp_path / "changed.so").write_bytes(bytes(data))
    if refused:
        with pytest.raises(modpack.FormatError, match="do not match its seal"):
            check_seal(tmp_path / "changed.so")
    else:
        assert check_seal(tmp_path / "changed.so").version == 2


NEWER = "has a version 3 seal; this runtime reads seal versions 1 to 2: upgrade modpack"


@needs_x86_64
@pytest.mark.parametrize("how", ["note says 3", "a later note, trailer says 3",
                                 "a later note, stripped", "trailer says 3, no note"])
def test_a_seal_newer_than_this_runtime_is_refused_as_incompatible(tmp_path, how):
    """A library with a seal newer than version 2 (its note's version, a note of modpack's seal
    type this reader does not know, or a trailer saying so in a file without a note it knows)
    is refused as incompatible, naming the newest version this runtime reads and saying to
    upgrade modpack, before anything of it is mapped."""
    if how == "trailer says 3, no note":
        data = bytearray((SEALED / "deploy.so").read_bytes())  # a version 1 trailer
    else:
        data = bytearray((SEALED_V2 / "deploy.so").read_bytes())
        d = find_seal_note(data)
        if how == "note says 3":
            struct.pack_into("<I", data, d, 3)
        else:  # a descriptor of another size, as a later version may write
            struct.pack_into("<II", data, d - 20 + 4, 600, 1)
            struct.pack_into("<I", data, d, 3)
    if how != "a later note, stripped":
        struct.pack_into("<I", data, len(data) - 80 + 64, 3)  # the trailer's version
    else:
        del data[-80:]
    path = tmp_path / "newer.so"
    path.write_bytes(bytes(data))
    with pytest.raises(modpack.IncompatibleError, match=NEWER):
        check_seal(path)
    with pytest.raises(modpack.IncompatibleError, match=NEWER):
        modpack.load_module(path)


def check_tree(root: modpack.Module) -> None:
    """|root| is the recorded tree, with its arrays and host functions."""
    assert root.type_key == "library"

    # Rebuild index -> loaded module by walking the recorded CSR tree from the root.
    row_ptr, children = EXPECTED["row_ptr"], EXPECTED["child_indices"]
    by_index: dict[int, modpack.Module] = {0: root}
    for index in range(len(EXPECTED["modules"])):
        module = by_index[index]
        imports = module.imported_modules
        wanted = children[row_ptr[index]:row_ptr[index + 1]]
        assert len(imports) == len(wanted), f"module[{index}] imports"
        for child_index, child in zip(wanted, imports, strict=True):
            assert by_index.setdefault(child_index, child) is child, f"module[{child_index}]"
    assert sorted(by_index) == list(range(len(EXPECTED["modules"])))

    # The diamond: A and B import the very same S object.
    a, b = root.imported_modules
    (s_under_a,) = a.imported_modules
    (s_under_b,) = b.imported_modules
    assert s_under_a is s_under_b

    for spec in EXPECTED["modules"]:
        module = by_index[spec["index"]]
        if spec["type_key"] == "_lib":
            continue
        assert module.type_key == spec["type_key"]
        arrays = module.arrays
        assert list(arrays) == [a["name"] for a in spec["arrays"]]
        for array_spec in spec["arrays"]:
            got, want = arrays[array_spec["name"]], expected_array(array_spec)
            assert got.dtype == want.dtype, array_spec["name"]
            assert got.shape == want.shape, array_spec["name"]
            assert got.tobytes() == want.tobytes(), array_spec["name"]
            assert not got.flags.writeable

    call = EXPECTED["functions"]["add_int"]
    assert root["add_int"](*call["args"]) == call["result"]
    x = np.array([1.0, 2.5, -3.0], dtype=np.float32)
    out = np.zeros_like(x)
    root["vadd"](x, x, out)
    assert out.tolist() == [2.0, 5.0, -6.0]


def parse_blob(data: object) -> object:
    """The C reader's parse of the bytes in the cffi buffer |data|, which must outlive it."""
    span = ffi.new("mp_const_byte_span_t*", {"data": data, "size": len(data)})
    out = ffi.new("mp_blob_t**")
    status = lib.mp_blob_parse(span[0], 0, out)
    if status != 0:
        raise error_from_status(status)
    return ffi.gc(out[0], lib.mp_blob_free)


@pytest.mark.parametrize("folder", [GOLDEN, SEALED, SEALED_V2], ids=lambda p: p.name)
def test_golden_blob_parses_with_the_c_reader(folder):
    blob = (folder / "devc.bin").read_bytes()
    data = ffi.from_buffer("uint8_t[]", blob)
    parsed = parse_blob(data)
    info = ffi.new("mp_blob_info_t*")
    lib.mp_blob_info(parsed, info)
    assert [info.format_major, info.format_minor] == EXPECTED["format_version"] == [1, 0]
    assert info.blob_size == EXPECTED["blob_size"] == len(blob)
    assert info.flags == lib.MP_FORMAT_FLAG_PAYLOAD_CHECKSUMS
    modules = EXPECTED["modules"]
    assert info.module_count == len(modules)
    assert info.edge_count == len(EXPECTED["child_indices"])

    entry = ffi.new("mp_blob_module_t*")
    type_keys, row_ptr = [], []
    for i in range(info.module_count):
        assert lib.mp_blob_module(parsed, i, entry) == 0
        type_keys.append(ffi.string(entry.type_key).decode())
        row_ptr.append(entry.first_edge)
        assert entry.first_edge + entry.child_count <= info.edge_count
        if type_keys[-1] == "_lib":
            assert (entry.payload_offset, entry.payload_size) == (0, 0)
        else:
            assert entry.payload_offset % lib.MP_FORMAT_PAYLOAD_ALIGNMENT == 0
            assert entry.payload_offset >= info.index_size
    row_ptr.append(info.edge_count)
    child_indices = [lib.mp_blob_child(parsed, e) for e in range(info.edge_count)]

    assert type_keys == [m["type_key"] for m in modules]
    assert row_ptr == EXPECTED["row_ptr"]
    assert child_indices == EXPECTED["child_indices"]
    assert lib.mp_blob_child(parsed, info.edge_count) == UINT64_MAX
    assert lib.mp_blob_module(parsed, info.module_count, entry) != 0


def embedded_blob(path: Path) -> bytes:
    """The bytes of `__dev_mblob` in the ELF file |path|, found through its section."""
    with path.open("rb") as f:
        elf = ELFFile(f)
        symbols = [
            sym
            for name in (".symtab", ".dynsym")
            if (table := elf.get_section_by_name(name)) is not None
            for sym in table.get_symbol_by_name("__dev_mblob") or []
        ]
        assert symbols, "no __dev_mblob symbol"
        sym = symbols[0]
        section = elf.get_section(sym["st_shndx"])
        assert section.name in (".lrodata", ".rodata", ".modpack.blob") or section.name.startswith(
            (".lrodata.", ".rodata.")
        ), section.name
        assert section["sh_flags"] & SH_FLAGS.SHF_ALLOC
        assert not section["sh_flags"] & SH_FLAGS.SHF_WRITE
        assert sym["st_value"] % 64 == 0
        offset = section["sh_offset"] + (sym["st_value"] - section["sh_addr"])
        assert sym["st_value"] + sym["st_size"] <= section["sh_addr"] + section["sh_size"]
        f.seek(offset)
        return f.read(sym["st_size"])


@pytest.mark.parametrize("folder", [GOLDEN, SEALED, SEALED_V2], ids=lambda p: p.name)
def test_golden_library_embeds_the_golden_blob(folder):
    assert embedded_blob(folder / "deploy.so") == (folder / "devc.bin").read_bytes()


def test_the_worked_example_in_the_format_docs_runs_as_written(tmp_path, monkeypatch):
    """docs/format.md's worked example: its script runs as printed, and the blob it reads back
    is the hex dump printed there, byte for byte."""
    text = (DATA.parents[1] / "docs" / "format.md").read_text()
    example = text[text.index("## Worked example"):]
    script, check = re.findall(r"```python\n(.*?)```", example, re.S)[:2]
    dump = example[example.index("00000000: "):]
    dump = dump[: dump.index("```")]
    folder = str(tmp_path / "fmtex")
    exec(script.replace("/tmp/fmtex", folder), {})
    exec(check.replace("/tmp/fmtex", folder), {})
    assert xxd((tmp_path / "fmtex" / "blob.bin").read_bytes()) == dump


def xxd(data: bytes) -> str:
    """What `xxd` prints for |data|."""
    lines = []
    for at in range(0, len(data), 16):
        row = data[at : at + 16]
        pairs = " ".join(row[i : i + 2].hex() for i in range(0, len(row), 2))
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in row)
        lines.append(f"{at:08x}: {pairs:<39}  {text}\n")
    return "".join(lines)
