"""``slim_library``: a sealed library holding only the device code the kept devices need.

The output is the input's bytes with a new blob: the host code (everything before the blob's
segment, and what follows it: symbol tables, section headers) is copied byte for byte, the
blob is written anew (:mod:`.blob`: device modules rewritten by :mod:`.payloads`, every other
payload — weights included — copied by the kernel at the same alignment), the few ELF fields
that hold the blob's size and what follows it are updated, and the file is sealed again. A
signature cannot survive (it signed other bytes): it is dropped, and the report says to sign
again. The same input and keep list give the same bytes. A ``.tar`` export gives a ``.tar``
(:func:`_slim_tar`): its host objects as they are, its blob object written anew by the
exporter's ELF packer, the tar seal anew. A file a load would refuse is refused first, with the
load's error (:mod:`modpack.tools.verdict`), and a copy whose section headers no longer fit what its
seal says (cut off, gone, damaged: :mod:`.layout`) with a FormatError.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ...errors import ArgumentError, FormatError, IncompatibleError, MissingFileError, ModpackError
from ...files.kernel_copy import copy_range
from ...files.scratch import AnonymousOutput, scratch_name
from ...files.tar_writer import TarWriter
from ...format.coverage import NOTE, note_fields, read_coverage
from ...format.image import Placement
from ...format.layout import LIB_TYPE_KEY, IndexExtras, align_up
from ...format.payload_views import slimmed_kinds
from ...format.seal import check_seal, seal_file
from ...format.tar_blob import ELF_ARCHES, find_tar_blob
from ...format.tar_seal import seal_tar
from ...packers.elf import write_elf_object
from ...runtime.binding import error_from_status, ffi, lib
from ...runtime.entries import describe_module, entry_module
from ..verdict import check_file, outcome
from .blob import BlobEntry, write_blob
from .keep import device_strings, kept_variants
from .layout import read_layout
from .payloads import FileRange, slim_payload

__all__ = ["SlimReport", "slim_library"]

_PHDR = struct.Struct("<IIQQQQQQ")
_PT_LOAD = 1


@dataclass
class SlimReport:
    """What slim did: the output, the devices kept for, per module the variants kept and
    dropped, the sizes, and notes (a dropped signature)."""

    output: Path
    devices: list[str]
    modules: list[dict[str, Any]] = field(default_factory=list)
    input_size: int = 0
    output_size: int = 0
    notes: list[str] = field(default_factory=list)


def slim_library(path: str | os.PathLike[str], out: str | os.PathLike[str],
                 keep: str | list[str]) -> SlimReport:
    """Write to |out| the library at |path| with only the device code the |keep| devices need
    (``"sm_90,gfx942"`` or a list; ``cuda:``/``rocm:`` device strings too): for each, the
    variant its loader chooses and the portable code it falls back on (PTX, generic ROCm
    targets). OpenCL and Vulkan code, host code and weights are kept byte for byte.

    Raises IncompatibleError naming the module when one has no code left for a kept device."""
    source, output = Path(path), Path(out)
    if not source.is_file():
        raise MissingFileError(f"no such library: {source}")
    if output.resolve() == source.resolve():
        raise ArgumentError(f"slim writes a new file: -o {output} is the input")
    devices = device_strings(keep)
    _require_loadable(source)
    if source.suffix == ".tar":
        return _slim_tar(source, output, devices)
    seal = check_seal(source)
    if seal is None:
        raise FormatError(f"{source} carries no seal; slim reads sealed libraries only")
    report = SlimReport(output, devices, input_size=source.stat().st_size)
    if seal.blob_size == 0:
        raise ModpackError(f"{source} holds host code only: nothing to slim")
    kept = kept_variants(source, devices)
    with open(source, "rb") as f:
        entries, row_ptr, child_indices, writer, extras = _read_blob(f, seal, kept, report,
                                                                     str(source))
        _write_library(f, seal, entries, row_ptr, child_indices, writer, extras, output, report,
                       str(source))
    report.output_size = output.stat().st_size
    return report


def _require_loadable(source: Path) -> None:
    """The loader's verdict on |source| (:mod:`modpack.tools.verdict`), its error when a load
    would refuse the file, or the first use of its code would fail: slim computes new checksums
    over what it keeps, so damage it copied would come out sealed as sound. The weight files a
    library refers to are no part of it: their absence does not stop a slim."""
    verdict = check_file(source)
    if verdict.ok or verdict.stage in ("weight files", "loaders"):
        return
    error = verdict.error
    kind = type(error) if isinstance(error, ModpackError) else FormatError
    raise kind(f"{source} {outcome(verdict.stage)}, so it is not slimmed: {verdict.message}")


def _read_blob(f: Any, seal: Any, kept: dict[int, set[str]], report: SlimReport, shown: str
               ) -> tuple[list[BlobEntry], list[int], list[int], tuple[int, int, int],
                          IndexExtras]:
    """The input's blob entries (|seal|: its blob_offset and blob_size in the file), with
    new payloads for the device modules that lose variants (read through a read-only mapping:
    only their pages are touched), its tree, its writer version, and its metadata and
    self-tests."""
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        base = ffi.from_buffer("uint8_t[]", mapped)
        blob_ptr = ffi.new("mp_blob_t**")
        try:
            span = ffi.new("mp_const_byte_span_t*")
            span.data = base + seal.blob_offset
            span.size = seal.blob_size
            status = lib.mp_blob_parse(span[0], lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, blob_ptr)
            if status != 0:
                raise error_from_status(status)
            blob = blob_ptr[0]
            info = ffi.new("mp_blob_info_t*")
            lib.mp_blob_info(blob, info)
            if info.format_minor > lib.MP_FORMAT_MINOR:
                lib.mp_blob_free(blob)
                # A later minor may carry fields and meanings this writer would drop.
                raise IncompatibleError(
                    f"{shown} holds a format {info.format_major}.{info.format_minor} blob; this "
                    f"modpack writes format {lib.MP_FORMAT_MAJOR}.{lib.MP_FORMAT_MINOR} and "
                    "would drop what the newer one added: slim it with the modpack that made it "
                    "(or a newer one)")
            entry = ffi.new("mp_blob_module_t*")
            slimmed = slimmed_kinds()
            entries: list[BlobEntry] = []
            row_ptr, child_indices = [0], []
            for i in range(info.module_count):
                lib.mp_blob_module(blob, i, entry)
                key = ffi.string(entry.type_key).decode()
                e = BlobEntry(key, entry.payload_offset, entry.payload_size,
                              entry.payload_checksum, lib.mp_blob_module_flags(blob, i))
                kids = [lib.mp_blob_child(blob, entry.first_edge + k)
                        for k in range(entry.child_count)]
                child_indices += kids
                row_ptr.append(len(child_indices))
                if key in slimmed and key != LIB_TYPE_KEY:
                    start = seal.blob_offset + e.offset
                    payload = view[start:start + e.size]
                    description = _module_description(key, base + start, e.size, e.flags)
                    where = f"{shown}: module[{i}] ({key})"
                    e.chunks = slim_payload(key, payload, description, kept.get(i, set()),
                                            where)
                    names = [v["arch"] for v in description["variants"]]
                    keep_names = [n for n in names if set(n.split("+")) & kept.get(i, set())]
                    report.modules.append({"index": i, "type_key": key, "kept": keep_names,
                                           "dropped": [n for n in names if n not in keep_names]})
                    if e.chunks is not None:  # kept code: by its place in the file
                        e.chunks = [FileRange(start + c.offset, c.size)
                                    if isinstance(c, FileRange) else c for c in e.chunks]
                    del payload
                entries.append(e)
            writer = (info.writer_major, info.writer_minor, info.writer_patch)
            extras = _extras(blob)
            lib.mp_blob_free(blob)
        finally:
            ffi.release(base)
            view.release()
    return entries, row_ptr, child_indices, writer, extras


def _extras(blob: Any) -> IndexExtras:
    """The metadata and self-tests of the parsed |blob|, as bytes: slim keeps them as they
    are (the output is the same artifact, with less code)."""
    span = ffi.new("mp_const_byte_span_t*")
    found = []
    for read in (lib.mp_blob_metadata, lib.mp_blob_selftests):
        read(blob, span)
        found.append(bytes(ffi.buffer(span.data, span.size)) if span.size else b"")
    return IndexExtras(*found)


def _module_description(key: str, data: Any, size: int, flags: int) -> dict[str, Any]:
    description: dict[str, Any] = describe_module(entry_module(key, data, size, flags))
    return description


def _write_library(f: Any, seal: Any, entries: list[BlobEntry], row_ptr: list[int],
                   child_indices: list[int], writer: tuple[int, int, int],
                   extras: IndexExtras, output: Path, report: SlimReport, shown: str) -> None:
    layout = read_layout(f, seal, shown)  # FormatError for section headers cut or damaged
    blob_end = seal.blob_offset + seal.blob_size
    src = f.fileno()
    target = AnonymousOutput(output)
    try:
        out = target.file
        dst = out.fileno()
        copy_range(src, dst, 0, 0, seal.blob_offset)
        size, index_size = write_blob(src, seal.blob_offset, entries, row_ptr, child_indices,
                                      dst, seal.blob_offset, layout.alignment, writer, extras)
        new_tail = align_up(seal.blob_offset + size, layout.tail_alignment)
        shift = new_tail - layout.tail_start
        os.ftruncate(dst, new_tail)
        copy_range(src, dst, layout.tail_start, new_tail, layout.body_end - layout.tail_start)
        out.seek(layout.phoff + layout.segment * _PHDR.size + 32)  # p_filesz, p_memsz
        out.write(struct.pack("<QQ", size, size))
        shoff = layout.shoff
        if shoff >= blob_end:
            out.seek(40)
            out.write(struct.pack("<Q", shoff + shift))
        new_shoff = shoff + shift if shoff >= blob_end else shoff
        for index, old in layout.moved:
            out.seek(new_shoff + index * layout.shentsize + 24)
            out.write(struct.pack("<Q", old + shift))
        out.seek(new_shoff + layout.anchor * layout.shentsize + 32)
        out.write(struct.pack("<Q", size))
        for at in layout.symbols:
            out.seek(at + (shift if at >= blob_end else 0) + 16)
            out.write(struct.pack("<Q", size))
        out.flush()
        coverage = read_coverage(out)
        if coverage is not None:
            fields = list(note_fields(out, coverage))
            if any(fields[-1]):
                report.notes.append(f"{shown} was signed; the signature signed other bytes and "
                                    "is dropped: sign the slimmed library again (modpack sign)")
            fields[-1] = bytes(len(fields[-1]))
            out.seek(coverage.note)
            out.write(NOTE.pack(*fields))
        if os.path.getsize(shown) > seal.file_size:
            report.notes.append(f"{shown} carries signatures after its seal; they are dropped: "
                                "sign the slimmed library again (modpack sign)")
        start = align_up(index_size, layout.alignment)
        placement = Placement(seal.blob_offset, seal.blob_vaddr, size,
                              seal.blob_offset + min(start, size), size - min(start, size))
        out.seek(0, os.SEEK_END)
        seal_file(out, placement)
        target.publish(0o755)
    finally:
        target.discard()


@dataclass(frozen=True)
class _Located:
    """A blob in a file that has no ELF seal to say where it is (a .tar's blob object)."""

    blob_offset: int
    blob_size: int


def _slim_tar(source: Path, output: Path, devices: list[str]) -> SlimReport:
    """A ``.tar`` export slimmed: a new ``.tar`` of the same members in the same order, the
    host objects byte for byte, the blob object written anew by the exporter's ELF packer
    around the slimmed blob, in its place in the archive (its payloads copied from the input
    by the kernel), tar headers as the exporter writes them (files.tar_writer: no time, owner
    or machine's mode), sealed with the tar seal. A .tar carries no signature (a signed one
    fails its tar seal)."""
    shown = str(source)
    located = find_tar_blob(source)  # its tar seal and members were checked with its verdict
    if located.member is None:
        raise ModpackError(f"{source} holds host code only: nothing to slim")
    arch = located.arch
    if arch is None:
        raise IncompatibleError(
            f"{shown}: its blob object is for {located.machine}; slim rewrites the blob objects "
            f"of {', '.join(sorted(ELF_ARCHES.values()))} .tar exports (export a .so, or export "
            "for one of those)")
    report = SlimReport(output, devices, input_size=source.stat().st_size)
    kept = kept_variants(source, devices)
    blob = _Located(located.offset, located.size)
    tmp = scratch_name(output)
    try:
        with open(source, "rb") as f:
            entries, row_ptr, child_indices, writer, extras = _read_blob(f, blob, kept, report,
                                                                         shown)

            def write(out: Any, offset: int) -> int:
                out.flush()
                size, _ = write_blob(f.fileno(), blob.blob_offset, entries, row_ptr,
                                     child_indices, out.fileno(), offset, located.alignment,
                                     writer, extras)
                return size

            with tarfile.open(source, "r") as tar, open(tmp, "w+b") as out:
                archive = TarWriter(out)
                for member in located.members[:-1]:
                    if member is located.member:  # written once, in its place
                        archive.add_written(member.name, lambda o, at: write_elf_object(
                            o, at, write, arch, located.alignment))
                    else:  # host code: the member's bytes as they are
                        content = tar.extractfile(member)
                        assert content is not None  # check_tar_seal: regular files only
                        archive.add_stream(member.name, content, member.size)
                archive.close()
        seal_tar(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, output)
    finally:
        tmp.unlink(missing_ok=True)
    report.output_size = output.stat().st_size
    return report


def describe_report(report: SlimReport) -> str:
    return json.dumps({"output": str(report.output), "devices": report.devices,
                       "modules": report.modules, "input_size": report.input_size,
                       "output_size": report.output_size, "notes": report.notes}, indent=2)
