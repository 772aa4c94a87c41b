"""Inspect a deployable library without loading it.

:func:`inspect_library` reads the file with pyelftools and never ``dlopen``\\ s it, so no code
from the file runs (no constructors). It finds ``__dev_mblob`` in the symbol tables, maps it to
its bytes in the file and hands them to the C runtime's ``mp_blob_parse`` — the only reader of
the format — with payload checksums verified; each module's registered loader then describes
its payload in place (kernels, arrays, arch variants) without touching any driver. What comes
back is plain data (see :func:`inspect_library` for the shape), the contract of
``modpack inspect --json``.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import subprocess
import tarfile
import tempfile
from typing import Any

from elftools.common.utils import struct_parse
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ..compat import zip_strict
from ..errors import FormatError, MissingFileError, ModpackError, ModpackOSError
from ..format.elf_errors import ELF_READ_ERRORS
from ..format.layout import (
    BLOB_SYMBOL,
    ENTRY_CODE_FRAMES,
    FLAG_PAYLOAD_CHECKSUMS,
    FUNC_SYMBOL_PREFIX,
    LIB_TYPE_KEY,
    LIBRARY_TYPE_KEY,
    SIGNATURE_SYMBOL_PREFIX,
    SYSTEM_LIB_ENTRY_PREFIX,
)
from ..format.signatures import read_signatures
from ..format.tar_blob import ELF_ARCHES
from ..format.tar_members import check_members
from ..format.tar_seal import check_tar_seal, has_tar_seal
from ..interop.tvm import BLOB_SYMBOLS as TVM_BLOB_SYMBOLS
from ..interop.tvm import read_tvm_blob
from ..metadata import decode_metadata
from ..runtime.binding import error_from_status, ffi, lib
from ..runtime.dtypes import dtype_name
from ..runtime.entries import describe_module, entry_module
from ..selftests.bundle import decode_bundle, selftest_summary
from ..toolchain.demangle import demangle, is_mangled
from .verdict import NOT_DAMAGE, Verdict, check_file
from .weight_reports import inspect_weight_file, is_weight_file

__all__ = ["inspect_library"]

_ELF_MAGIC = b"\x7fELF"
_CTX_LIBRARY_SYMBOL = ffi.string(lib.MP_CTX_LIBRARY_SYMBOL).decode()


def inspect_library(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Describe the library at |path|: its blob, module tree and exported host functions.

    Returns ``{"path", "format_version", "writer_version", "blob", "modules", "import_tree",
    "functions", "seal"}``: ``blob`` is ``{"symbol", "section", "file_offset", "size",
    "index_size", "index_checksum", "payload_checksums"}`` or ``None`` for a library without
    ``__dev_mblob`` (whose tree is then a single ``"library"`` module, and whose versions are
    ``None``); each module is ``{"index", "type_key", "offset", "size", "checksum",
    "children", "parents"}``, with checksums as 16 hex digits (``None`` for ``_lib``);
    ``seal`` is ``{"state", "digest", "message"}`` (see :func:`_seal_report`); ``loads`` is
    ``{"ok", "stage", "message"}``: whether a load would take the file, and if not, where and
    why (:func:`modpack.tools.verdict.check_file`); ``metadata`` is the dict the library was
    exported with (``export_library(..., metadata=...)``) and ``selftests`` a summary of each
    self-test it carries (see :func:`_extras`), each None when it has none.

    A weight file gets :func:`~modpack.tools.weight_reports.inspect_weight_file`'s report instead
    (``"kind": "weight file"``).

    Raises :class:`~modpack.FormatError` (or a subclass) for a file that is not ELF, is
    truncated or is corrupt, :class:`~modpack.MissingFileError` (a ``FileNotFoundError``) for
    a missing file.
    """
    shown = os.fspath(path)
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would block open()
        raise FormatError(f"{shown} is not a regular file")
    if shown.endswith(".tar"):
        return _inspect_tar(shown)
    if os.path.isfile(path) and is_weight_file(path):
        return inspect_weight_file(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise MissingFileError(f"no such library: {shown}") from None
    except OSError as exc:
        raise ModpackOSError(f"cannot open {shown}: {exc.strerror or exc}") from None
    with f:
        file_size = os.fstat(f.fileno()).st_size
        head = f.read(len(_ELF_MAGIC))
        if len(head) < len(_ELF_MAGIC) or head != _ELF_MAGIC:
            raise FormatError(
                f"{shown} was not made by modpack: it is not an ELF file ({file_size} bytes, "
                "no ELF header); inspect reads the libraries modpack's export_library writes "
                "(.so, .tar, .o) and its weight files"
            )
        seal_report, sealed_blob, by_note = _seal_report(shown)
        note = None
        f.seek(0)
        try:
            elf = ELFFile(f)
            machine = _machine(elf)
            headers: list[Any] | None
            location: tuple[str, int, int] | None = None
            tvm = None
            if by_note:
                # Sealed by its note (version 2), which covers what the dynamic loader reads
                # and none of what strippers rewrite: read as the loader reads it (the dynamic
                # segment's symbols, the blob where the seal says), whatever the section
                # headers hold; they only name the blob's section, when they are sound.
                tables = _dynamic_tables(elf, shown)
                headers, note = _sound_section_headers(elf, shown, file_size)
            else:
                headers = _section_headers(elf, shown, file_size)
                tables = _symbol_tables(elf, headers, shown)
            prefix = _system_lib_prefix(tables)
            blob_symbol = _find_symbol(tables, prefix + BLOB_SYMBOL)
            functions = _host_functions(tables, prefix)
            signatures = _host_signatures(f, None if by_note else headers, tables, functions,
                                          file_size, prefix)
            if not by_note and headers is not None:
                location = (_locate_blob(elf, headers, blob_symbol, shown, file_size)
                            if blob_symbol is not None else None)
                tvm = (None if blob_symbol is not None
                       else _tvm_blob(elf, headers, tables, shown, file_size))
            elif sealed_blob is not None:
                section, note = _blob_section(elf, headers, sealed_blob, note)
                location = (section, *sealed_blob)
        except ModpackError:
            raise
        except ELF_READ_ERRORS as exc:
            raise FormatError(
                f"{shown} is a damaged ELF file: {exc or type(exc).__name__}; "
                "copy or export it again"
            ) from None

        signers = [s["key_id"] for s in read_signatures(shown)]  # unchecked: verify --key
        ours = (blob_symbol is not None or bool(functions) or seal_report["state"] != "absent"
                or _find_symbol(tables, prefix + _CTX_LIBRARY_SYMBOL) is not None)
        result: dict[str, Any] = {
            "path": shown,
            "producer": "modpack" if ours else None,  # None: no seal, blob or symbol of ours
            "machine": machine,
            "format_version": None,
            "writer_version": None,
            "blob": None,
            "modules": [_module(0, LIBRARY_TYPE_KEY, 0, 0, None, [], [])],
            "import_tree": {"row_ptr": [0, 0], "child_indices": []},
            "functions": functions,
            "signatures": signatures,
            "seal": seal_report,
            "content_digest": None,
            "signed_by": signers,
            "loads": None,
            "metadata": None,
            "selftests": None,
        }
        if sealed_blob is not None and location is not None:  # where the loader takes it
            location = (location[0], *sealed_blob)
        if location is not None:
            section, offset, size = location
            result.update(_parse_blob(f, offset, size, shown))
            result["blob"] = {"symbol": BLOB_SYMBOL, "section": section, "file_offset": offset,
                              **result["blob"]}
        elif tvm is not None:
            result.update(tvm)
        if note is not None:
            result["note"] = note
        result["loads"] = _loads(shown, result, prefix, location)
        loads = result["loads"]  # a file refused as damaged is not hashed
        if loads is None or loads["ok"] or loads["stage"] in NOT_DAMAGE:
            f.seek(0)  # whole (a load would not read it all either)
            result["content_digest"] = _content_digest(f)
        return result


def _loads(shown: str, report: dict[str, Any], prefix: str,
           location: tuple[str, int, int] | None) -> dict[str, Any] | None:
    """What its own loader would say of the file (:mod:`modpack.tools.verdict`): a shared library's
    is ``load_module``'s, a system library's is ``load_system_lib``'s (its blob and payloads;
    it has no seal), a TVM library's is none of modpack's (``None``)."""
    if report["producer"] == "tvm":
        return None
    if prefix:  # a system library: the blob is checked as load_system_lib checks it
        verdict = _payload_verdict(shown, location) if location is not None else Verdict(True)
    else:
        verdict = check_file(shown)
    if verdict.stage in ("blob", "payloads") and verdict.error is not None:
        raise verdict.error  # damage in what inspect reports: nothing to report
    return {"ok": verdict.ok, "stage": verdict.stage, "message": verdict.message}


def _payload_verdict(path: str, location: tuple[str, int, int]) -> Verdict:
    """The blob at |location| of the file |path| parsed with its payload checksums."""
    _, offset, size = location
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        base = ffi.from_buffer("uint8_t[]", mapped)
        try:
            span = ffi.new("mp_const_byte_span_t*")
            span.data = base + offset
            span.size = size
            out = ffi.new("mp_blob_t**")
            status = lib.mp_blob_parse(span[0], 0, out)
            if status == 0:
                lib.mp_blob_free(out[0])
                return Verdict(True)
            exc = error_from_status(status)
            return Verdict(False, "payloads", type(exc)(f"{path}: {BLOB_SYMBOL}: {exc}"))
        finally:
            ffi.release(base)


def _tvm_blob(elf: ELFFile, headers: list[Any], tables: list[SymbolTableSection], shown: str,
              file_size: int) -> dict[str, Any] | None:
    """The report's TVM part for a library TVM exported (its blob read, never run), else
    None: ``producer`` "tvm", the blob, the modules and tree, the host functions TVM exports."""
    for symbol, layout in TVM_BLOB_SYMBOLS.items():
        sym = _find_symbol(tables, symbol)
        if sym is None:
            continue
        section, offset, size = _locate_blob(elf, headers, sym, shown, file_size)
        elf.stream.seek(offset)
        report = read_tvm_blob(elf.stream.read(size), layout, shown)
        prefix = "__tvm_ffi_" if layout == "framed" else ""
        dynamic = [t for t in tables if t["sh_type"] == "SHT_DYNSYM"]
        functions = sorted({
            s.name[len(prefix):] for t in dynamic for s in t.iter_symbols()
            if _defined(s) and s["st_info"]["type"] == "STT_FUNC" and s.name.startswith(prefix)
            and not s.name.startswith("__tvm_ffi__") and (prefix or not s.name.startswith("_"))
        })
        return {"producer": "tvm", "format_version": report["format_version"],
                "blob": {"symbol": symbol, "section": section, "file_offset": offset,
                         "size": size},
                "modules": report["modules"], "import_tree": report["import_tree"],
                "functions": functions, "note": report["note"]}
    return None


def _inspect_tar(shown: str) -> dict[str, Any]:
    """A ``.tar`` export holds the objects to link: the blob is in one of them (``devc.o``),
    the host functions in the others. Nothing is linked or run."""
    try:
        tar = tarfile.open(shown)
    except FileNotFoundError:
        raise MissingFileError(f"no such library: {shown}") from None
    except tarfile.TarError as exc:
        raise FormatError(f"{shown} is not a readable tar archive: {exc}") from None
    with tar, tempfile.TemporaryDirectory(prefix="modpack-inspect-") as scratch:
        try:
            every = tar.getmembers()
        except (tarfile.TarError, EOFError) as exc:
            raise FormatError(f"{shown} is not a readable tar archive: {exc}") from None
        check_members(shown, every)  # what every reader of a .tar export refuses
        members = [m for m in every if m.name.endswith(".o")]
        if not members:
            raise FormatError(f"{shown} holds no object files; it is not a modpack .tar export")
        paths = [os.path.join(scratch, m.name) for m in members]
        try:
            tar.extractall(scratch, members=members, filter="data")
        except (tarfile.TarError, OSError, ValueError) as exc:
            raise FormatError(
                f"{shown}: cannot extract its object files: {exc or type(exc).__name__}"
            ) from None
        reports = [inspect_library(path) for path in paths]
        with_blob = [r for r in reports if r["blob"] is not None]
        verdict = check_file(shown)  # the seal, the objects, the blob as the archive holds it
        if verdict.stage in ("blob", "payloads") and verdict.error is not None:
            raise verdict.error  # damage in what inspect reports: nothing to report
    result = dict(with_blob[0] if with_blob else reports[0])
    result["path"] = shown
    result["loads"] = {"ok": verdict.ok, "stage": verdict.stage, "message": verdict.message}
    result["functions"] = sorted({f for r in reports for f in r["functions"]})
    result["signatures"] = {k: v for r in reports for k, v in r["signatures"].items()}
    result["seal"] = _tar_seal_report(shown)
    with open(shown, "rb") as f:
        result["content_digest"] = _content_digest(f)
    return result


def _machine(elf: ELFFile) -> str:
    """The machine the file was built for, as ``platform.machine()`` names it (``"x86_64"``,
    ``"aarch64"``), or the ELF header's name for one modpack does not name (``"EM_RISCV"``)."""
    name = str(elf["e_machine"])
    return ELF_ARCHES.get(name, name)


def _content_digest(f: Any) -> str:
    """``sha256:<hex>`` of the whole file: what identifies the artifact (exports are
    reproducible, so the same tree and toolchain give the same digest), as ``sha256sum``,
    registries and signing tools name files."""
    digest = hashlib.sha256()
    while chunk := f.read(1 << 20):
        digest.update(chunk)
    return f"sha256:{digest.hexdigest()}"


def _seal_report(path: str) -> tuple[dict[str, Any], tuple[int, int] | None, bool]:
    """The library's seal, checked by the runtime (which reads the file, nothing more):
    ``state`` is ``"valid"`` (``digest`` then holds its XXH3-128), ``"absent"`` (a library made
    without modpack's export, or damaged at its end), ``"damaged"`` or ``"newer"`` (a seal this
    runtime cannot read); ``message`` says why when it is not valid. With it, where a valid
    seal puts the blob (file offset, size), where the loader takes it from, else None; and
    whether the seal is a valid seal note (version 2)."""
    seal = ffi.new("mp_seal_v1_t*")
    status = lib.mp_seal_check_file(os.fsencode(path), seal)
    if status == 0:
        report = {"state": "valid", "digest": f"{seal.digest_high:016x}{seal.digest_low:016x}",
                  "message": None}
        return (report, (seal.blob_offset, seal.blob_size) if seal.blob_size else None,
                seal.version == lib.MP_SEAL_VERSION)
    state = {lib.MP_ERR_NOT_FOUND: "absent", lib.MP_ERR_INCOMPATIBLE: "newer"}.get(status,
                                                                                   "damaged")
    return {"state": state, "digest": None, "message": str(error_from_status(status))}, None, False


def _tar_seal_report(path: str) -> dict[str, Any]:
    """The same for a ``.tar`` export's seal member."""
    try:
        check_tar_seal(path)
        return {"state": "valid", "digest": None, "message": None}
    except FormatError as exc:
        return {"state": "damaged" if has_tar_seal(path) else "absent", "digest": None,
                "message": str(exc)}


def _section_headers(elf: ELFFile, shown: str, file_size: int) -> list[Any]:
    """Every section header, after checking that the headers and the bytes of every section lie
    inside the file (a truncated copy gets a clear message instead of whatever pyelftools would
    hit first, and no later read can run past the end or loop over a bogus size)."""
    h = elf.header
    ph_end = h["e_phoff"] + h["e_phnum"] * h["e_phentsize"]
    if h["e_phnum"] and ph_end > file_size:
        raise FormatError(
            f"{shown} is truncated or damaged: its program headers end at byte {ph_end} but the "
            f"file has {file_size} bytes; copy or export it again"
        )
    if h["e_shoff"] == 0:
        raise FormatError(
            f"{shown} has no section headers (stripped with sstrip?); inspect needs them to "
            "find the symbol tables"
        )
    entry_size = elf.structs.Elf_Shdr.sizeof()
    if h["e_shentsize"] != entry_size or h["e_shoff"] + entry_size > file_size:
        raise FormatError(
            f"{shown} is truncated or damaged: no valid section header table at byte "
            f"{h['e_shoff']} of {file_size}; copy or export it again"
        )
    count = elf.num_sections()
    sh_end = h["e_shoff"] + count * entry_size
    if count == 0 or sh_end > file_size:
        raise FormatError(
            f"{shown} is truncated: its section headers end at byte {sh_end} but the file has "
            f"{file_size} bytes; copy or export it again"
        )
    headers = [struct_parse(elf.structs.Elf_Shdr, elf.stream, h["e_shoff"] + i * entry_size)
               for i in range(count)]
    for i, sh in enumerate(headers):
        if sh["sh_type"] != "SHT_NOBITS" and sh["sh_offset"] + sh["sh_size"] > file_size:
            raise FormatError(
                f"{shown} is truncated or damaged: section {i} ends at byte "
                f"{sh['sh_offset'] + sh['sh_size']} but the file has {file_size} bytes; "
                "copy or export it again"
            )
    return headers


_UNNAMED = "(placed by the seal)"  # the blob's section, when no sound section header names it


def _sound_section_headers(elf: ELFFile, shown: str,
                           file_size: int) -> tuple[list[Any] | None, str | None]:
    """The section headers of a library sealed by its note, or None and a note saying why
    not: the seal does not cover them (strippers rewrite them), so damaged or gone they cost
    only what they alone say (the blob's section name, ``.symtab``), never the report."""
    if elf.header["e_shoff"] == 0 or elf.header["e_shnum"] == 0:
        why = "it has no section headers"
    else:
        try:
            return _section_headers(elf, shown, file_size), None
        except (FormatError, *ELF_READ_ERRORS):
            why = "its section headers are damaged or do not fit the file"
    return None, (f"{why}; the dynamic loader does not read them and the seal does not cover "
                  "them, so it was read as the loader reads it (program headers, dynamic "
                  "symbols, the blob where the seal puts it); the blob's section is not named")


def _blob_section(elf: ELFFile, headers: list[Any] | None, blob: tuple[int, int],
                  note: str | None) -> tuple[str, str | None]:
    """The name of the section that holds the |blob| (file offset, size) the seal places,
    when the section headers are sound and one does; else :data:`_UNNAMED` and |note|, or a
    note saying so."""
    offset, size = blob
    for i, sh in enumerate(headers or []):
        if (sh["sh_type"] == "SHT_PROGBITS" and sh["sh_offset"] <= offset
                and offset + size <= sh["sh_offset"] + sh["sh_size"]):
            try:
                name = elf.get_section(i).name
            except ELF_READ_ERRORS:
                name = ""
            if name:
                return name, note
            break
    if note is None and headers is not None:
        note = ("no section header names the blob's section (the section headers, which the "
                "seal does not cover and the dynamic loader does not read, were changed); "
                "the blob was read where the seal puts it")
    return _UNNAMED, note


class _DynamicSymbols:
    """The dynamic symbol table as the dynamic loader finds it (``PT_DYNAMIC``: ``DT_SYMTAB``,
    ``DT_STRTAB`` and the hash table), standing in for ``.dynsym``: what a library sealed by
    its note is read through, since the seal covers it and not the section headers."""

    def __init__(self, segment: Any) -> None:
        self._segment = segment

    def __getitem__(self, key: str) -> str:
        return {"sh_type": "SHT_DYNSYM"}[key]

    def iter_symbols(self) -> Any:
        return self._segment.iter_symbols()

    def get_symbol_by_name(self, name: str) -> list[Any] | None:
        found: list[Any] | None = self._segment.get_symbol_by_name(name)
        return found


class _LoaderView(ELFFile):
    """The file as the dynamic loader reads it: its program headers, no section headers
    (pyelftools otherwise consults them, damaged or not, to read the dynamic segment), and
    every segment but a PT_LOAD found through its address, where a PT_LOAD maps it, never
    through its own p_offset (which loaders do not read, and a version 2 seal reads as
    zeros)."""

    def num_sections(self) -> int:
        return 0

    def iter_sections(self, type: str | None = None) -> Any:
        return iter(())

    def _get_segment_header(self, n: int) -> Any:
        header = super()._get_segment_header(n)
        if header["p_type"] == "PT_LOAD":
            return header
        vaddr, size = header["p_vaddr"], header["p_filesz"]
        for i in range(self.num_segments()):
            load = super()._get_segment_header(i)
            if (load["p_type"] == "PT_LOAD" and load["p_vaddr"] <= vaddr
                    and vaddr + size <= load["p_vaddr"] + load["p_filesz"]):
                header["p_offset"] = load["p_offset"] + vaddr - load["p_vaddr"]
                break
        return header


def _dynamic_tables(elf: ELFFile, shown: str) -> list[Any]:
    for segment in _LoaderView(elf.stream).iter_segments():
        if segment["p_type"] == "PT_DYNAMIC":
            return [_DynamicSymbols(segment)]
    raise FormatError(f"{shown} has neither usable section headers nor a dynamic segment")


def _symbol_tables(elf: ELFFile, headers: list[Any], shown: str) -> list[SymbolTableSection]:
    """.dynsym first (what the dynamic loader sees), then .symtab. Only these sections are
    built, so damage elsewhere (say a hash table) does not matter."""
    entry_size = elf.structs.Elf_Sym.sizeof()
    tables = []
    for kind in ("SHT_DYNSYM", "SHT_SYMTAB"):
        for i, sh in enumerate(headers):
            if sh["sh_type"] != kind:
                continue
            link = sh["sh_link"]
            if (sh["sh_entsize"] != entry_size or not 0 < link < len(headers)
                    or headers[link]["sh_type"] != "SHT_STRTAB"):
                raise FormatError(f"{shown} is damaged: symbol table section {i} is malformed")
            table = elf.get_section(i)
            if not isinstance(table, SymbolTableSection):
                raise FormatError(f"{shown} is damaged: symbol table section {i} is malformed")
            tables.append(table)
    return tables


def _defined(sym: Any) -> bool:
    return bool(sym["st_shndx"] != "SHN_UNDEF")


def _find_symbol(tables: list[SymbolTableSection], name: str) -> Any | None:
    for table in tables:
        for sym in table.get_symbol_by_name(name) or []:
            if _defined(sym):
                return sym
    return None


def _system_lib_prefix(tables: list[SymbolTableSection]) -> str:
    """``"NAME_"`` for a system library (``export_library(..., system_lib=NAME)``), whose
    symbols carry that prefix beside ``modpack_system_lib_NAME``; else ``""``."""
    for table in tables:
        for sym in table.iter_symbols():
            if sym.name.startswith(SYSTEM_LIB_ENTRY_PREFIX) and _defined(sym):
                return sym.name[len(SYSTEM_LIB_ENTRY_PREFIX):] + "_"
    return ""


def _host_functions(tables: list[SymbolTableSection], prefix: str = "") -> list[str]:
    """Names of the exported ``__mp_func_<name>`` symbols, sorted. Exported means .dynsym; an
    object without one (a relocatable export) falls back to the global symbols of .symtab."""
    dynamic = [t for t in tables if t["sh_type"] == "SHT_DYNSYM"]
    names: set[str] = set()
    for table in dynamic or tables:
        for sym in table.iter_symbols():
            if not sym.name.startswith(prefix + FUNC_SYMBOL_PREFIX) or not _defined(sym):
                continue
            if not dynamic and sym["st_info"]["bind"] == "STB_LOCAL":
                continue
            name = sym.name[len(prefix + FUNC_SYMBOL_PREFIX):]
            if name:
                names.add(name)
    return sorted(names)


def _host_signatures(f: Any, headers: list[Any] | None, tables: list[SymbolTableSection],
                     functions: list[str], file_size: int, prefix: str = "") -> dict[str, str]:
    """The signatures typed exports declare (``__mp_sig_<name>``, a NUL-terminated string), by
    function name. Read from the file, bounded by the symbol's section (without section
    headers: by the loaded segment that holds it); one that does not fit (a damaged file) is
    left out rather than guessed."""
    found: dict[str, str] = {}
    for name in functions:
        sym = _find_symbol(tables, prefix + SIGNATURE_SYMBOL_PREFIX + name)
        if headers is None:
            text = _read_loaded(f, sym) if sym is not None else None
            if text is not None:
                found[name] = text
            continue
        shndx = sym["st_shndx"] if sym is not None else None
        if sym is None or not isinstance(shndx, int) or shndx >= len(headers):
            continue
        section = headers[shndx]
        start = sym["st_value"] - section["sh_addr"]  # relocatable objects: sh_addr is 0
        size = sym["st_size"]
        if (section["sh_type"] != "SHT_PROGBITS" or not 0 < size <= 4096 or start < 0
                or start + size > section["sh_size"]
                or section["sh_offset"] + start + size > file_size):
            continue
        f.seek(section["sh_offset"] + start)
        text = f.read(size).split(b"\0", 1)[0]
        found[name] = text.decode("utf-8", errors="replace")
    return found


def _read_loaded(f: Any, sym: Any) -> str | None:
    """The NUL-terminated string symbol |sym| holds, read where a PT_LOAD segment maps it."""
    size = sym["st_size"]
    if not 0 < size <= 4096:
        return None
    for segment in _LoaderView(f).iter_segments():
        start = sym["st_value"] - segment["p_vaddr"]
        if (segment["p_type"] == "PT_LOAD" and 0 <= start
                and start + size <= segment["p_filesz"]):
            f.seek(segment["p_offset"] + start)
            return str(f.read(size).split(b"\0", 1)[0].decode("utf-8", errors="replace"))
    return None


def _locate_blob(elf: ELFFile, headers: list[Any], sym: Any, shown: str,
                 file_size: int) -> tuple[str, int, int]:
    """(section name, file offset, byte count) of the blob: the symbol's st_size, or up to its
    section's end when the symbol has no size."""
    shndx = sym["st_shndx"]
    if not isinstance(shndx, int) or shndx >= len(headers):
        raise FormatError(f"{shown}: {BLOB_SYMBOL} is not in a regular section ({shndx})")
    kind = headers[shndx]["sh_type"]
    if kind != "SHT_PROGBITS":
        raise FormatError(
            f"{shown}: {BLOB_SYMBOL} is in section {shndx} of type {kind}, which holds no "
            "program data; the file is damaged"
        )
    section = elf.get_section(shndx)
    name = section.name or f"section {shndx}"
    start, length = section["sh_addr"], section["sh_size"]
    value, size = sym["st_value"], sym["st_size"]
    if not start <= value < start + length:
        raise FormatError(
            f"{shown}: {BLOB_SYMBOL} at 0x{value:x} lies outside its section {name} "
            f"[0x{start:x}, 0x{start + length:x})"
        )
    room = start + length - value
    if size == 0:
        size = room
    elif size > room:
        raise FormatError(
            f"{shown}: {BLOB_SYMBOL} claims {size} bytes but only {room} remain in its section "
            f"{name}; the file is damaged"
        )
    offset = value - start + section["sh_offset"]
    if offset + size > file_size:
        raise FormatError(
            f"{shown} is truncated: {BLOB_SYMBOL} ends at byte {offset + size} but the file has "
            f"{file_size} bytes; copy or export it again"
        )
    return name, offset, size


def _parse_blob(f: Any, offset: int, size: int, shown: str) -> dict[str, Any]:
    """Run the C reader over the mapped blob bytes and copy out what it decoded. The payload
    checksums are the verdict's business (it checks them only where a load would, so a
    damaged file costs no more here than it would a load)."""
    with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        base = ffi.from_buffer("uint8_t[]", mapped)
        try:
            span = ffi.new("mp_const_byte_span_t*")
            span.data = base + offset
            span.size = size
            out = ffi.new("mp_blob_t**")
            status = lib.mp_blob_parse(span[0], lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, out)
            if status != 0:
                exc = error_from_status(status)
                raise type(exc)(f"{shown}: {BLOB_SYMBOL}: {exc}") from None
            try:
                report = _read_parsed(out[0])
                report.update(_extras(out[0], base + offset, report["blob"], shown))
            finally:
                lib.mp_blob_free(out[0])
            entry_flags = report.pop("entry_flags")
            for module, flags in zip(report["modules"], entry_flags):
                if module["type_key"] != LIB_TYPE_KEY:
                    payload = base + offset + module["offset"]
                    module["contents"] = _contents(module["type_key"], payload, module["size"],
                                                   flags)
                    code = _code_sizes(module["contents"])
                    if code is not None:
                        module["code_frames"] = bool(flags & ENTRY_CODE_FRAMES)
                        module["code"] = code
            return report
        finally:
            ffi.release(base)


def _extras(blob: Any, start: Any, blob_report: dict[str, Any], shown: str
            ) -> dict[str, Any]:
    """What the blob's index carries besides modules (format 1.2): ``"metadata"`` (the dict
    the library was exported with, or None) and ``"selftests"`` (one summary per test,
    :func:`~modpack.selftests.bundle.selftest_summary`; or None), and where each lies in
    the blob (``blob_report``'s ``metadata_offset``/``_size``, ``selftests_offset``/``_size``:
    0 when absent). FormatError for either not as modpack writes it."""
    found: dict[str, Any] = {"metadata": None, "selftests": None}
    span = ffi.new("mp_const_byte_span_t*")
    for name, read in (("metadata", lib.mp_blob_metadata),
                       ("selftests", lib.mp_blob_selftests)):
        read(blob, span)
        offset = (int(ffi.cast("uintptr_t", span.data)) - int(ffi.cast("uintptr_t", start))
                  if span.size else 0)
        blob_report[f"{name}_offset"], blob_report[f"{name}_size"] = offset, int(span.size)
        if not span.size:
            continue
        data = bytes(ffi.buffer(span.data, span.size))
        if name == "metadata":
            found[name] = decode_metadata(data, shown)
        else:
            found[name] = [selftest_summary(t) for t in decode_bundle(data, shown)]
    return found


def _read_parsed(blob: Any) -> dict[str, Any]:
    info = ffi.new("mp_blob_info_t*")
    lib.mp_blob_info(blob, info)
    entry = ffi.new("mp_blob_module_t*")
    count = info.module_count
    keys, entries, children = [], [], []
    row_ptr, child_indices = [0], []
    for i in range(count):
        status = lib.mp_blob_module(blob, i, entry)
        if status != 0:
            raise error_from_status(status)
        keys.append(ffi.string(entry.type_key).decode("ascii"))
        entries.append((entry.payload_offset, entry.payload_size, entry.payload_checksum,
                        lib.mp_blob_module_flags(blob, i)))
        kids = [lib.mp_blob_child(blob, entry.first_edge + k) for k in range(entry.child_count)]
        children.append(kids)
        child_indices.extend(kids)
        row_ptr.append(len(child_indices))
    parents: list[list[int]] = [[] for _ in range(count)]
    for i, kids in enumerate(children):
        for c in kids:
            if not parents[c] or parents[c][-1] != i:
                parents[c].append(i)
    modules = [
        _module(i, keys[i], off, size, None if keys[i] == LIB_TYPE_KEY else checksum,
                children[i], parents[i])
        for i, (off, size, checksum, _) in enumerate(entries)
    ]
    return {
        "format_version": f"{info.format_major}.{info.format_minor}",
        "writer_version": f"{info.writer_major}.{info.writer_minor}.{info.writer_patch}",
        "blob": {
            "size": info.blob_size,
            "index_size": info.index_size,
            "index_checksum": _hex(info.index_checksum),
            "payload_checksums": bool(info.flags & FLAG_PAYLOAD_CHECKSUMS),
        },
        "modules": modules,
        "import_tree": {"row_ptr": row_ptr, "child_indices": child_indices},
        "entry_flags": [flags for *_, flags in entries],  # popped by _parse_blob
    }


def _code_sizes(contents: dict[str, Any]) -> dict[str, Any] | None:
    """A device module's code, all pieces together: bytes as stored, bytes once decoded, and
    whether any piece is compressed (each piece's own sizes are in its description)."""
    pieces: list[dict[str, Any]] = []

    def collect(value: Any) -> None:
        if isinstance(value, dict):
            if "raw_bytes" in value and "stored_bytes" in value:
                pieces.append(value)
            for item in value.values():
                collect(item)
        elif isinstance(value, list):
            for item in value:
                collect(item)

    collect(contents)
    if not pieces:
        return None
    return {"stored_bytes": sum(p["stored_bytes"] for p in pieces),
            "raw_bytes": sum(p["raw_bytes"] for p in pieces),
            "compressed": any(p.get("encoding") == "zstd" for p in pieces)}


def _contents(type_key: str, payload: Any, size: int, flags: int = 0) -> dict[str, Any]:
    """What a module holds, as its registered loader sees it: the loader parses the payload
    in place (no driver is touched, no code from the file runs) and the module lists its
    functions, arrays and kind-specific details."""
    try:
        module = entry_module(type_key, payload, size, flags)
    except Exception as exc:  # the loader's refusal: a ModpackError, or a Python loader's own
        return {"error": str(exc)}
    functions = [
        ffi.string(lib.mp_module_function_name(module, i)).decode()
        for i in range(lib.mp_module_function_count(module))
    ]
    arrays = []
    name = ffi.new("char**")
    tensor = ffi.new("DLTensor**")
    for i in range(lib.mp_module_array_count(module)):
        if lib.mp_module_array_at(module, i, name, tensor) != 0:
            continue
        t = tensor[0]
        arrays.append({
            "name": ffi.string(name[0]).decode(),
            "dtype": dtype_name(t.dtype.code, t.dtype.bits, t.dtype.lanes),
            "shape": [t.shape[d] for d in range(t.ndim)],
        })
    contents = {"functions": functions, "arrays": arrays, **describe_module(module)}
    _add_demangled(contents.get("kernels", []))
    return contents


def _add_demangled(kernels: list[dict[str, Any]]) -> None:
    """A kernel known by a C++ (mangled) symbol gets ``"demangled"``: its readable
    signature. Inspecting still works where c++filt is missing, without it."""
    mangled = [k for k in kernels if is_mangled(k.get("symbol", k["name"]))]
    if not mangled:
        return
    try:
        readable = demangle([k.get("symbol", k["name"]) for k in mangled])
    except (ModpackError, OSError, subprocess.SubprocessError):
        return
    for kernel, text in zip_strict(mangled, readable):
        kernel["demangled"] = text


def _module(index: int, type_key: str, offset: int, size: int, checksum: int | None,
            children: list[int], parents: list[int]) -> dict[str, Any]:
    return {
        "index": index,
        "type_key": type_key,
        "offset": offset,
        "size": size,
        "checksum": None if checksum is None else _hex(checksum),
        "children": children,
        "parents": parents,
        "contents": None,  # filled in for payload modules: functions, arrays, kind details
        # then, for device modules: "code_frames" and "code" (their code's stored and raw
        # sizes)
    }


def _hex(value: int) -> str:
    return f"{value:016x}"
