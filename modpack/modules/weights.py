"""The ``weights`` kind: a module that refers to weight files instead of holding arrays.

Its payload (``csrc/include/modpack/kinds/weights.h``, read here through the binding) names
each file, its digest and the arrays the module hands out with their dtypes and shapes, so
that the runtime finds the files when the library loads and refuses any other. The arrays
themselves never enter the library: changing the code does not rewrite the weights, two
libraries compiled from one model share one weight file, and the weights can be swapped in a
loaded tree. Host code reads them exactly as a ``const`` module's (``mp_backend_get_array``).

The files are modpack's own (``save_weights``) or where users already keep their weights:
safetensors files (one, a sharded ``model.safetensors.index.json``, or a folder of them) and
GGUF files, read in place by the runtime. Those formats record no checksums or digests of
their arrays, so the library records them (computed here, once, at authoring), with the
SHA-256 of each file's header: a load then checks the file against the library exactly as it
checks a modpack weight file, and a signed library vouches for its weights.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from ..errors import ArgumentError, FormatError, MissingFileError
from ..format.layout import check_struct
from ..runtime.binding import check, ffi, lib, string
from ..runtime.weight_files import describe_module, load_options
from ..weights.format import chunked_sha256
from .base import BinaryModule

__all__ = ["ArrayRecord", "ArraySpec", "WeightFileRef", "WeightsModule", "weights_module"]

_HEADER = check_struct(struct.Struct("<II32sQIIQ"), "mp_weights_ref_header_v1_t")
_RECORD = check_struct(struct.Struct("<QIBBHIIQ"), "mp_weights_ref_record_v1_t")
_HEADER_V2 = check_struct(struct.Struct("<IIQ48s"), "mp_weights_ref_header_v2_t")
_FILE_V2 = check_struct(struct.Struct("<32sQII16s"), "mp_weights_ref_file_v2_t")
_RECORD_V2 = check_struct(struct.Struct("<QIBBHIIQQ32s24s"), "mp_weights_ref_record_v2_t")
_MAX_FILE_NAME: int = lib.MP_WEIGHTS_REF_MAX_FILE_NAME
_MAX_FILES: int = lib.MP_WEIGHTS_REF_MAX_FILES
TYPE_KEY: str = string(lib.MP_WEIGHTS_KIND)
_FORMATS = {"modpack": lib.MP_WEIGHTS_FORMAT_MODPACK,
            "safetensors": lib.MP_WEIGHTS_FORMAT_SAFETENSORS, "gguf": lib.MP_WEIGHTS_FORMAT_GGUF}

ArraySpec = tuple[str, tuple[int, int, int], tuple[int, ...]]
"""An array a weights module hands out: its name, DLPack dtype (code, bits, lanes) and shape."""


@dataclass(frozen=True)
class WeightFileRef:
    """A weight file a weights module reads: its name (found beside the library, or where the
    load says), its format (``"modpack"``, ``"safetensors"``, ``"gguf"``) and its digest (a
    modpack file's content digest; another format's header SHA-256)."""

    name: str
    format: str
    digest: bytes


@dataclass(frozen=True)
class ArrayRecord:
    """An array a weights module hands out, the file it is in (an index into the module's
    files) and, for a file in another format, the XXH3-64 and chunked SHA-256 of its bytes."""

    name: str
    dtype: tuple[int, int, int]
    shape: tuple[int, ...]
    file: int = 0
    checksum: int = 0
    digest: bytes = bytes(32)


class WeightsModule(BinaryModule):
    """A reference to the weight file named |file_name| whose content digest is |digest|,
    handing out |arrays| (each an :data:`ArraySpec`). Made by :func:`weights_module`, or by
    ``export_library(weights=...)`` in place of each ``const`` module; one that reads several
    files, or files in another format, is made by :meth:`from_files`."""

    type_key = TYPE_KEY

    def __init__(self, file_name: str, digest: bytes, arrays: Sequence[ArraySpec]) -> None:
        super().__init__()
        self.files = [WeightFileRef(_file_name(file_name), "modpack", _digest(digest))]
        self.records = [ArrayRecord(name, dtype, tuple(shape)) for name, dtype, shape in arrays]
        self._payload = self._pack()

    @classmethod
    def from_files(cls, files: Sequence[WeightFileRef],
                   records: Sequence[ArrayRecord]) -> WeightsModule:
        """A module reading |files| (1 to MP_WEIGHTS_REF_MAX_FILES, each named once) and
        handing out |records|."""
        module = cls.__new__(cls)
        BinaryModule.__init__(module)
        if not 1 <= len(files) <= _MAX_FILES:
            raise ArgumentError(f"a weights module reads 1 to {_MAX_FILES} files, not "
                                f"{len(files)}")
        names = [_file_name(f.name) for f in files]
        if len(set(names)) != len(names):
            raise ArgumentError("a weights module names each of its files once")
        for f in files:
            if f.format not in _FORMATS:
                raise ArgumentError(f"a weight file's format is one of {sorted(_FORMATS)}, not "
                                    f"{f.format!r}")
            _digest(f.digest)
        for r in records:
            if not 0 <= r.file < len(files):
                raise ArgumentError(f"array {r.name!r} names file {r.file}, of {len(files)}")
        module.files = list(files)
        module.records = list(records)
        module._payload = module._pack()
        return module

    @property
    def file_name(self) -> str:
        """The first file's name (the only one's, for a module of one file)."""
        return self.files[0].name

    @property
    def digest(self) -> bytes:
        """The first file's digest."""
        return self.files[0].digest

    @property
    def arrays_spec(self) -> list[ArraySpec]:
        """The arrays handed out, as :data:`ArraySpec`."""
        return [(r.name, r.dtype, r.shape) for r in self.records]

    def _pack(self) -> bytes:
        if len(self.files) == 1 and self.files[0].format == "modpack":
            return self._pack_v1()
        return self._pack_v2()

    def _tail(self, start: int) -> tuple[list[int], list[int], list[bytes]]:
        """Offsets of each array's shape and name from |start|, and the tail's parts."""
        names = [r.name.encode() for r in self.records]
        cursor, shape_offsets, name_offsets, parts = start, [], [], []
        for r in self.records:
            shape_offsets.append(cursor)
            parts.append(struct.pack(f"<{len(r.shape)}Q", *r.shape))
            cursor += 8 * len(r.shape)
        for n in names:
            name_offsets.append(cursor)
            parts.append(n)
            cursor += len(n)
        return shape_offsets, name_offsets, parts

    def _pack_v1(self) -> bytes:
        start = _HEADER.size + _RECORD.size * len(self.records)
        shapes, names, tail = self._tail(start)
        cursor = start + sum(len(p) for p in tail)
        file_name = self.files[0].name.encode()
        parts = [_HEADER.pack(lib.MP_WEIGHTS_REF_VERSION, 0, self.files[0].digest, cursor,
                              len(file_name), 0, len(self.records))]
        for i, r in enumerate(self.records):
            code, bits, lanes = r.dtype
            parts.append(_RECORD.pack(names[i], len(r.name.encode()), code, bits, lanes,
                                      len(r.shape), 0, shapes[i]))
        return b"".join([*parts, *tail, file_name])

    def _pack_v2(self) -> bytes:
        start = _HEADER_V2.size + _FILE_V2.size * len(self.files) + \
            _RECORD_V2.size * len(self.records)
        shapes, names, tail = self._tail(start)
        cursor = start + sum(len(p) for p in tail)
        parts = [_HEADER_V2.pack(lib.MP_WEIGHTS_REF_VERSION_FILES, len(self.files),
                                 len(self.records), bytes(48))]
        file_names = []
        for f in self.files:
            encoded = f.name.encode()
            parts.append(_FILE_V2.pack(f.digest, cursor, len(encoded), _FORMATS[f.format],
                                       bytes(16)))
            file_names.append(encoded)
            cursor += len(encoded)
        for i, r in enumerate(self.records):
            code, bits, lanes = r.dtype
            parts.append(_RECORD_V2.pack(names[i], len(r.name.encode()), code, bits, lanes,
                                         len(r.shape), r.file, shapes[i], r.checksum, r.digest,
                                         bytes(24)))
        return b"".join([*parts, *tail, *file_names])

    def payload_size(self) -> int:
        return len(self._payload)

    def payload_chunks(self) -> Iterable[Any]:
        yield self._payload

    def __repr__(self) -> str:
        files = (repr(self.files[0].name) if len(self.files) == 1
                 else f"{len(self.files)} files ({self.files[0].name!r}, ...)")
        return (f"<modpack.WeightsModule {files} arrays={len(self.records)} "
                f"sha256:{self.digest.hex()[:16]}...>")


def _file_name(name: Any) -> str:
    encoded = name.encode() if isinstance(name, str) else b""
    if not 1 <= len(encoded) <= _MAX_FILE_NAME or "/" in name or "\0" in name or \
            name in (".", ".."):
        raise ArgumentError(f"a weight file's name is a file name of 1 to {_MAX_FILE_NAME} "
                            f"bytes, not {name!r}")
    return str(name)


def _digest(digest: Any) -> bytes:
    if not isinstance(digest, bytes) or len(digest) != 32:
        raise ArgumentError("a weight file's digest is 32 bytes (SHA-256)")
    return digest


def weights_module(path: str | os.PathLike[str]) -> WeightsModule:
    """A module for a tree that refers to existing weight files instead of holding their
    arrays: host code reads them with ``mp_backend_get_array`` / ``mp_backend_get_array_on``
    exactly as from a ``const`` module.

    |path| is a modpack weight file (:func:`modpack.save_weights`), a safetensors file, a
    sharded safetensors index (``model.safetensors.index.json``, its shards beside it), a
    GGUF file, or a folder holding one of these (an index, else every ``*.safetensors``, else
    one ``.gguf``). The library records each file's name and digest (and, for safetensors and
    GGUF, which record none themselves, each array's checksum and digest, computed here once);
    at load each file is looked for beside the library (or where ``load_module(...,
    weights=...)`` says) and must be this very file, checked as a modpack weight file is.
    GGUF's block-quantized tensors are handed out as their bytes (``uint8``, shape [...,
    blocks, block bytes]; ``inspect`` and :func:`modpack.load_weights` say their type)."""
    shown = Path(path)
    if shown.is_dir():
        return _folder(shown)
    if not shown.is_file():
        raise MissingFileError(f"no such weight file: {shown}")
    if shown.name.endswith(".index.json"):
        return _sharded(shown)
    handle, info = _open(shown)
    weight_file = info["weight_file"]
    if weight_file["format"] == "modpack":
        return WeightsModule(shown.name, bytes.fromhex(info["digest"].removeprefix("sha256:")),
                             _specs(handle))
    return WeightsModule.from_files([_ref(shown, weight_file)], _records(handle, 0))


def _open(path: Path) -> tuple[Any, dict[str, Any]]:
    """The weight file at |path| loaded on its own by the runtime (the one reader of every
    format), its checksums not checked (a file in another format has none), and its
    description."""
    options = load_options(lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS)
    out = ffi.new("mp_module_t**")
    check(lib.mp_weights_load(os.fsencode(path), options.pointer, out))
    handle = ffi.gc(out[0], lib.mp_module_release)
    return handle, describe_module(handle)


def _ref(path: Path, weight_file: dict[str, Any]) -> WeightFileRef:
    return WeightFileRef(path.name, weight_file["format"],
                         bytes.fromhex(weight_file["digest"].removeprefix("sha256:")))


def _records(handle: Any, file: int, only: set[str] | None = None) -> list[ArrayRecord]:
    """The arrays of a file in another format loaded on its own (|handle|), with the XXH3-64
    and chunked SHA-256 of each one's bytes, hashed on every core (hashlib and xxhash release
    the GIL over large buffers)."""
    specs = _specs(handle)
    views = _views(handle, len(specs))
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        sums = list(pool.map(lambda v: (xxhash.xxh3_64_intdigest(v), chunked_sha256(v)), views))
    return [ArrayRecord(name, dtype, shape, file, checksum, digest)
            for (name, dtype, shape), (checksum, digest) in zip(specs, sums)
            if only is None or name in only]


def _views(handle: Any, count: int) -> list[memoryview]:
    """The bytes of each array of a module, as it hands them out (the file's mapping, or the
    runtime's aligned copy of an array the file misaligns, which holds the same bytes)."""
    name = ffi.new("char**")
    tensor = ffi.new("DLTensor**")
    out = []
    for i in range(count):
        check(lib.mp_module_array_at(handle, i, name, tensor))
        size = lib.mp_array_nbytes(tensor[0])
        out.append(memoryview(ffi.buffer(ffi.cast("char*", tensor[0].data), size)))
    return out


def _sharded(index: Path) -> WeightsModule:
    """A module over the shards a ``*.safetensors.index.json`` lists (its ``weight_map``: each
    tensor's shard), each shard beside the index and holding exactly the tensors the map gives
    it."""
    problem = f"{index} is not a safetensors index: a JSON object whose 'weight_map' maps " \
        "each tensor's name to its shard's file name"
    try:
        weight_map = json.loads(index.read_text()).get("weight_map")
    except (OSError, ValueError, AttributeError) as e:
        raise FormatError(f"{problem} ({e.__class__.__name__})") from None
    if not isinstance(weight_map, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()):
        raise FormatError(problem)
    shards = sorted(set(weight_map.values()))
    files, records = [], []
    for k, shard in enumerate(shards):
        path = index.parent / _file_name(shard)
        if not path.is_file():
            raise MissingFileError(f"{index} lists the shard {shard!r}, which is not beside it "
                                   f"({path})")
        handle, info = _open(path)
        have = {a["name"] for a in info["arrays"]}
        want = {name for name, s in weight_map.items() if s == shard}
        missing = sorted(want - have)
        if missing:
            raise FormatError(f"{index} places the tensor {missing[0]!r} in {shard!r}, which "
                              f"does not hold it ({len(missing)} such)")
        files.append(_ref(path, info["weight_file"]))
        records.extend(_records(handle, k, want))
    return WeightsModule.from_files(files, records)


def _folder(folder: Path) -> WeightsModule:
    """A folder's weights: its one safetensors index, else all its ``*.safetensors`` files,
    else its one ``.gguf`` file."""
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    if len(indexes) == 1:
        return _sharded(indexes[0])
    if len(indexes) > 1:
        raise ArgumentError(f"{folder} holds several safetensors indexes "
                            f"({', '.join(p.name for p in indexes)}): give the one to use")
    shards = sorted(folder.glob("*.safetensors"))
    if shards:
        files, records = [], []
        for k, path in enumerate(shards):
            handle, info = _open(path)
            files.append(_ref(path, info["weight_file"]))
            records.extend(_records(handle, k))
        names = [r.name for r in records]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})[0]
            raise FormatError(f"the safetensors files of {folder} hold {twice!r} more than "
                              "once: give the index that says which to use")
        return WeightsModule.from_files(files, records)
    ggufs = sorted(folder.glob("*.gguf"))
    if len(ggufs) == 1:
        return weights_module(ggufs[0])
    raise MissingFileError(f"{folder} holds no weights modpack reads: a safetensors index, "
                           f"safetensors files or one GGUF file ({len(ggufs)} .gguf files)")


def _specs(handle: Any) -> list[ArraySpec]:
    """The arrays of a loaded weights module, as specs."""
    out: list[ArraySpec] = []
    name = ffi.new("char**")
    tensor = ffi.new("DLTensor**")
    for i in range(lib.mp_module_array_count(handle)):
        check(lib.mp_module_array_at(handle, i, name, tensor))
        t = tensor[0]
        out.append((string(name[0]), (t.dtype.code, t.dtype.bits, t.dtype.lanes),
                    tuple(t.shape[d] for d in range(t.ndim))))
    return out
