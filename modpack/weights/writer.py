"""Writing weight files: :func:`save_weights` (public) and :func:`write_weight_file` (what it
and ``export_library`` use).

The file is written once, streaming, in three steps, so that saving costs about one sequential
write of the data and never more memory than the caller's arrays:

1. *First pass*: every array is checked (name, dtype, rank) and its XXH3-64 taken (at memory
   speed). The checksums find identical arrays (same size and checksum, confirmed byte for
   byte), which are stored once, and later show whether an array changed during the save.
   The index's size depends only on the names and ranks, so the whole layout is now known.
2. *Data*: each stored array streams from the caller's memory into the file, chunk by chunk,
   while a thread pool (``hashlib`` releases the GIL) takes the SHA-256 of each chunk for the
   array's chunked digest. Once a chunk is both written and hashed, its bytes go into a second
   XXH3 of the array, which must equal the first: so the bytes written and the bytes digested
   are the ones the save began with, or the save fails naming the array (the file never holds
   an array that does not match its record).
3. *Index and seal*: the index, with every digest and its checksum, is written at offset 0
   (the data was written after it), then the seal.

The file is made in an anonymous file beside the output and renamed over it when complete
(:class:`~modpack.files.scratch.AnonymousOutput`), so a save that fails or is killed leaves
nothing, and an earlier file at the path stays intact until the new one replaces it whole.
Large files are handed to the disk as they stream (:mod:`modpack.files.write_behind`).
The same arrays and alignment always give the same bytes.
"""

from __future__ import annotations

import hashlib
import os
import struct
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import xxhash

from ..compat import zip_strict
from ..errors import ArgumentError
from ..files.destination import check_destination
from ..files.disk_full import full_disk_reported
from ..files.scratch import AnonymousOutput
from ..files.write_behind import WRITE_BEHIND_FROM, WriteBehind
from ..format.seal import write_seal
from ..progress import Progress
from ..runtime.array import numpy_of
from ..runtime.dtypes import array_dtype_to_dl
from .format import (
    DIGEST_CHUNK,
    FORMAT_MAJOR,
    FORMAT_MINOR,
    HEADER,
    HEADER_SIZE,
    INDEX_ALIGNMENT,
    INDEX_CHECKSUM_OFFSET,
    MAGIC,
    MAX_ALIGNMENT,
    MAX_NAME,
    MAX_NDIM,
    MIN_ALIGNMENT,
    RECORD,
    RECORD_SIZE,
)

__all__ = ["PendingWeights", "WrittenWeights", "prepare_weight_file", "save_weights",
           "write_weight_file"]

_FILE_MODE = 0o644  # data, not code
_COMPARE_CHUNK = 4 << 20  # bytes compared at a time when confirming identical arrays


@dataclass(frozen=True)
class WrittenWeights:
    """What :func:`write_weight_file` wrote: the file, its content digest (the SHA-256 of its
    index, which names the whole content: what a library binds and a signature signs), and each
    array's dtype and shape, in record order."""

    path: Path
    digest: bytes
    arrays: dict[str, tuple[np.dtype, tuple[int, ...]]]

    @property
    def digest_hex(self) -> str:
        """The content digest as tools print it: ``sha256:<64 hex digits>``."""
        return f"sha256:{self.digest.hex()}"


def save_weights(arrays: Mapping[str, Any], path: str | os.PathLike[str], *,
                 alignment: int = MIN_ALIGNMENT) -> Path:
    """Save named arrays as a weight file at |path| (docs/format.md, "Weight files"), outside
    any library, so that libraries refer to them by name and content digest, several processes
    map them once, and a new set of weights ships without rebuilding code.

    |arrays| maps names (str, 1 to 4096 bytes of UTF-8 without NUL) to numpy arrays or anything
    ``np.asarray`` takes, or DLPack producers numpy cannot convert (a PyTorch float8 or
    float4_e2m1fn_x2 tensor), of any dtype DLPack describes (bfloat16 and float8 from
    ml_dtypes too, float4 packed in pairs: :data:`modpack.float4_e2m1fn_x2`, made by
    :func:`modpack.pack_float4`; ml_dtypes' float4/float6 arrays, one value per byte, are
    refused) and up to 32 dimensions; the file keeps the mapping's order. Each array's data starts
    at a multiple of |alignment| (a power of two from 64 to 2 MiB; 4096 lets a loader map
    arrays page by page). Identical arrays are stored once. Bad input raises
    :class:`~modpack.errors.ArgumentError` before any file is touched; an array changed during
    the save raises it too, and a full disk :class:`~modpack.errors.ModpackOSError`, leaving
    any earlier file at |path| as it was. Returns the path written.
    """
    if not isinstance(arrays, Mapping):
        raise ArgumentError(f"save_weights expects a mapping of name -> array (a dict), not "
                            f"{type(arrays).__name__}")
    return write_weight_file(list(arrays.items()), path, alignment).path


def write_weight_file(items: Sequence[tuple[str, np.ndarray]], path: str | os.PathLike[str],
                      alignment: int = MIN_ALIGNMENT) -> WrittenWeights:
    """Write the weight file of |items| (name, array) at |path|, in that order, and say what
    was written. The lower level of :func:`save_weights`, for callers that need the content
    digest or the arrays' descriptions; it checks and refuses the same input the same way."""
    pending = prepare_weight_file(items, path, alignment)
    try:
        pending.publish()
    finally:
        pending.discard()
    return pending.written


class PendingWeights:
    """A weight file written completely but not yet in place (an anonymous file beside its
    path): ``export_library(weights=...)`` writes it, then the library that refers to it, and
    puts the weight file in place just before the library, so a failed export leaves an
    earlier weight file, and the earlier library that refers to it, as they were."""

    def __init__(self, target: AnonymousOutput, written: WrittenWeights) -> None:
        self._target = target
        self.written = written

    def publish(self) -> None:
        """Put the file in place (renamed over any earlier one)."""
        with full_disk_reported(self.written.path, self.written.path.parent, "save"):
            self._target.publish(_FILE_MODE)

    def discard(self) -> None:
        """Drop the file unless it was published."""
        self._target.discard()


def prepare_weight_file(items: Sequence[tuple[str, np.ndarray]], path: str | os.PathLike[str],
                        alignment: int = MIN_ALIGNMENT) -> PendingWeights:
    """Write the weight file of |items| as :func:`write_weight_file` does, but leave it to the
    caller to :meth:`~PendingWeights.publish` (or discard) it."""
    _check_alignment(alignment)
    output = check_destination(path, "save", "weights.mpw")
    arrays = _prepare(items)
    layout = _Layout.plan(arrays, alignment)
    with full_disk_reported(output, output.parent, "save"):
        target, index = _write(output, arrays, layout)
    return PendingWeights(target, WrittenWeights(
        output, hashlib.sha256(index).digest(),
        {a.name: (a.array.dtype, tuple(int(n) for n in a.array.shape)) for a in arrays}))


@dataclass(eq=False)
class _Array:
    """One array to write: its record's facts, and (once known) where its data lies."""

    name: str
    encoded: bytes
    array: np.ndarray  # C-contiguous
    data: memoryview  # its bytes, flat
    dl: tuple[int, int, int]
    checksum: int = 0  # XXH3-64 of the data, from the first pass
    stored: _Array | None = None  # the array whose data range it shares (itself if stored)
    offset: int = 0  # data_offset in the file
    chunk_digests: list[bytes] = field(default_factory=list)
    digest: bytes = b""

    @property
    def size(self) -> int:
        return len(self.data)


def _check_alignment(alignment: Any) -> None:
    ok = (isinstance(alignment, int) and not isinstance(alignment, bool)
          and MIN_ALIGNMENT <= alignment <= MAX_ALIGNMENT and alignment & (alignment - 1) == 0)
    if not ok:
        raise ArgumentError(f"alignment must be a power of two from {MIN_ALIGNMENT} to "
                            f"{MAX_ALIGNMENT}, not {alignment!r}: e.g. 64 (the default) or 4096 "
                            "(arrays on page boundaries)")


def _prepare(items: Sequence[tuple[str, Any]]) -> list[_Array]:
    """Check every name and array and take them as C-contiguous numpy arrays (non-contiguous
    input copied to C order, as ``const_module`` does); then the first pass: each array's
    XXH3-64, and which arrays repeat an earlier one's bytes."""
    arrays: list[_Array] = []
    seen: set[str] = set()
    for item in items:
        if not (isinstance(item, tuple) and len(item) == 2):
            raise ArgumentError(f"weight file items are (name, array) pairs, not {item!r:.80}")
        name, value = item
        encoded = _check_name(name)
        if name in seen:
            raise ArgumentError(f"array name {name!r} is given twice: names in a weight file "
                                "are unique, rename one of them")
        seen.add(name)
        arrays.append(_as_array(name, encoded, value))
    for a in arrays:
        a.checksum = xxhash.xxh3_64_intdigest(a.data)
    stored: dict[tuple[int, int], list[_Array]] = {}
    for a in arrays:
        candidates = stored.setdefault((a.size, a.checksum), [])
        a.stored = next((c for c in candidates if _same_bytes(c, a)), a)
        if a.stored is a:
            candidates.append(a)
    return arrays


def _check_name(name: Any) -> bytes:
    """Array names are str of 1 to MAX_NAME bytes of UTF-8, without NUL."""
    try:
        encoded = name.encode() if isinstance(name, str) else b""
    except UnicodeEncodeError:  # a lone surrogate
        encoded = b""
    if not 1 <= len(encoded) <= MAX_NAME or b"\0" in encoded:
        raise ArgumentError(f"array name {name!r:.100} must be a str of 1 to {MAX_NAME} bytes of "
                            "UTF-8 without NUL: rename it")
    return encoded


def _as_array(name: str, encoded: bytes, value: Any) -> _Array:
    try:
        array = numpy_of(value)  # a PyTorch float8 or float4_e2m1fn_x2 tensor through DLPack
    except Exception as exc:  # ragged lists, objects numpy cannot convert
        raise ArgumentError(f"array {name!r} cannot be saved: numpy cannot make an array of it "
                            f"({exc}); pass a numpy array") from None
    if not array.flags.c_contiguous:  # (ascontiguousarray would turn 0-d into 1-d)
        array = array.copy(order="C")
    try:
        dl = array_dtype_to_dl(array.dtype, "it")
    except TypeError as exc:
        raise ArgumentError(f"array {name!r} cannot be saved: {exc}") from None
    if array.ndim > MAX_NDIM:
        raise ArgumentError(f"array {name!r} has {array.ndim} dimensions; a weight file holds up "
                            f"to {MAX_NDIM}: reshape it")
    data = array.reshape(-1).view(np.uint8).data
    return _Array(name, encoded, array, data, dl)


def _same_bytes(a: _Array, b: _Array) -> bool:
    """Whether two arrays of one size and checksum hold the same bytes (the same memory, or
    compared in bounded pieces): a checksum match alone is not proof."""
    x, y = np.frombuffer(a.data, np.uint8), np.frombuffer(b.data, np.uint8)
    if x.ctypes.data == y.ctypes.data:
        return True
    return all(np.array_equal(x[at : at + _COMPARE_CHUNK], y[at : at + _COMPARE_CHUNK])
               for at in range(0, len(x), _COMPARE_CHUNK))


def _align(value: int, alignment: int) -> int:
    return (value + alignment - 1) // alignment * alignment


@dataclass(frozen=True)
class _Layout:
    """Where everything goes: the index's parts, the data region, each stored array."""

    alignment: int
    index_size: int
    data_offset: int
    data_size: int
    shape_offsets: list[int]
    name_offsets: list[int]

    @classmethod
    def plan(cls, arrays: list[_Array], alignment: int) -> _Layout:
        """Header, records, all shapes, all names, zero padding to a multiple of 64; the data
        region at the next multiple of |alignment|, each stored array at the next multiple of
        |alignment| in record order (an empty one too, so ranges never go backwards)."""
        cursor = HEADER_SIZE + RECORD_SIZE * len(arrays)
        shape_offsets = []
        for a in arrays:
            shape_offsets.append(cursor)
            cursor += 8 * a.array.ndim
        name_offsets = []
        for a in arrays:
            name_offsets.append(cursor)
            cursor += len(a.encoded)
        index_size = _align(cursor, INDEX_ALIGNMENT)
        data_offset = cursor = _align(index_size, alignment)
        for a in arrays:
            if a.stored is a:
                a.offset = _align(cursor, alignment)
                cursor = a.offset + a.size
        for a in arrays:
            assert a.stored is not None
            a.offset = a.stored.offset
        return cls(alignment, index_size, data_offset, cursor - data_offset, shape_offsets,
                   name_offsets)


def _write(output: Path, arrays: list[_Array], layout: _Layout) -> tuple[AnonymousOutput, bytes]:
    """Write the file in an anonymous file beside |output|, not yet in place; returns it and
    the index bytes."""
    target = AnonymousOutput(output)
    try:
        f: BinaryIO = target.file
        with Progress("save", output.name, layout.data_size) as progress:
            if layout.data_size >= WRITE_BEHIND_FROM:
                behind = WriteBehind(f)
                _write_data(behind, arrays, layout, output, progress)
                behind.finish()
            else:
                _write_data(f, arrays, layout, output, progress)
        index = _pack_index(arrays, layout)
        f.seek(0)
        f.write(index)
        f.write(bytes(layout.data_offset - layout.index_size))
        end = layout.data_offset + layout.data_size  # where the file ends, and the seal goes
        write_seal(f, blob_offset=0, blob_vaddr=0, blob_size=end,
                   payloads_offset=layout.data_offset, payloads_size=layout.data_size)
    except BaseException:
        target.discard()
        raise
    return target, index


def _chunks(data: memoryview) -> Iterator[memoryview]:
    """|data| in the chunks of the chunked SHA-256 (the pieces written and hashed)."""
    for at in range(0, len(data), DIGEST_CHUNK):
        yield data[at : at + DIGEST_CHUNK]


def _sha256(chunk: memoryview) -> bytes:
    return hashlib.sha256(chunk).digest()


def _hash_threads() -> int:
    """Threads for the chunks' SHA-256: one per core but the one the writing thread needs to
    copy the data into the page cache (on a 2-core machine, a second hash thread slowed a
    512 MiB save by about 12 %, the writes waiting for a core)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, cores - 1)


@dataclass
class _Pending:
    """A chunk written and handed to the pool; or, with no chunk, the end of an array."""

    array: _Array
    hasher: Any
    chunk: memoryview | None = None
    future: Future[bytes] | None = None


def _write_data(f: Any, arrays: list[_Array], layout: _Layout, output: Path,
                progress: Progress) -> None:
    """Stream each stored array into |f| at its offset, zero padding between, hashing its
    chunks on a thread pool; fill in every array's digest, and fail naming an array whose
    bytes are not those of the first pass."""
    stored = [a for a in arrays if a.stored is a]
    pool = ThreadPoolExecutor(max_workers=_hash_threads(), thread_name_prefix="modpack-sha256")
    pending: deque[_Pending] = deque()
    try:
        f.seek(layout.data_offset)
        cursor = layout.data_offset
        for a in stored:
            f.write(bytes(a.offset - cursor))
            hasher = xxhash.xxh3_64()
            for chunk in _chunks(a.data):
                pending.append(_Pending(a, hasher, chunk, pool.submit(_sha256, chunk)))
                f.write(chunk)
                progress(len(chunk))
                _settle(pending, output, wait=False)
            pending.append(_Pending(a, hasher))
            cursor = a.offset + a.size
        _settle(pending, output, wait=True)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    for a in arrays:
        assert a.stored is not None
        if a.stored is not a and xxhash.xxh3_64_intdigest(a.data) != a.checksum:
            raise _changed(a, output)
        a.digest = a.stored.digest


def _settle(pending: deque[_Pending], output: Path, wait: bool) -> None:
    """Take the chunks at the head of |pending| whose SHA-256 is done (all of them, waiting,
    when |wait|): their digests go to their array, their bytes into its second XXH3; at an
    array's end, that XXH3 must equal the first pass's."""
    while pending and (wait or pending[0].future is None or pending[0].future.done()):
        p = pending.popleft()
        a = p.array
        if p.future is not None and p.chunk is not None:
            a.chunk_digests.append(p.future.result())
            p.hasher.update(p.chunk)
            continue
        if p.hasher.intdigest() != a.checksum:
            raise _changed(a, output)
        a.digest = hashlib.sha256(b"".join(a.chunk_digests)).digest()  # no chunks: sha256(b"")


def _changed(a: _Array, output: Path) -> ArgumentError:
    return ArgumentError(
        f"array {a.name!r} changed while it was being saved to {output} (its bytes differ from "
        "when the save began): finish changing it before saving, or save a copy "
        f"(array.copy()); any earlier {output.name} is intact")


def _pack_index(arrays: list[_Array], layout: _Layout) -> bytes:
    """The index, bytes [0, index_size): header, records, shapes, names, zero padding, with
    its checksum."""
    parts = [HEADER.pack(MAGIC, FORMAT_MAJOR, FORMAT_MINOR, HEADER_SIZE, layout.index_size,
                         len(arrays), layout.data_offset, layout.data_size, layout.alignment,
                         0, 0)]
    for a, shape_offset, name_offset in zip_strict(arrays, layout.shape_offsets,
                                                   layout.name_offsets):
        code, bits, lanes = a.dl
        parts.append(RECORD.pack(name_offset, len(a.encoded), code, bits, lanes, a.array.ndim, 0,
                                 shape_offset, a.offset, a.size, a.checksum, a.digest, 0))
    parts.extend(struct.pack(f"<{a.array.ndim}Q", *a.array.shape) for a in arrays)
    parts.extend(a.encoded for a in arrays)
    index = bytearray(b"".join(parts))
    index += bytes(layout.index_size - len(index))
    struct.pack_into("<Q", index, INDEX_CHECKSUM_OFFSET, xxhash.xxh3_64_intdigest(bytes(index)))
    return bytes(index)
