"""ModuleSerializer: index a module tree and write ``__dev_mblob`` (format v1).

Indexing: every module reachable from the root gets one index, depth-first in import order
with the root at 0; a module imported by several parents (a DAG) is indexed once. All
DSO-exportable modules (``c``, ``llvm``) merge into one ``_lib`` node, because they become one
host library; an export whose merge would close a cycle is refused.

Writing streams each payload to the file once, hashing as it goes, then writes the index
(which holds the checksums) at the front.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import xxhash

from ..compat import zip_strict
from ..errors import ArgumentError, ModpackError
from ..format import (
    LIB_TYPE_KEY,
    MAX_TYPE_KEY,
    WRITER_VERSION,
    EntryRecord,
    IndexExtras,
    IndexLayout,
    pack_index,
    type_key_is_valid,
)
from ..format.code_frames import CodeFrames
from ..format.layout import ALIGNMENT, ENTRY_CODE_FRAMES, NO_EXTRAS, align_up
from ..log import export_log, timed
from ..modules.tree import HostNode, Node, imports_of, walk
from ..progress import Progress

__all__ = ["BlobFile", "BlobPlan", "ModuleSerializer"]

SMALL_PAYLOAD = 64 << 10  # payloads up to this size are joined and written at once


class BlobFile(Protocol):
    """What the blob is written into: a seekable binary file opened for reading and writing
    (or :class:`~modpack.files.write_behind.WriteBehind` over one)."""

    def write(self, data: Any, /) -> int: ...
    def read(self, size: int = -1, /) -> bytes: ...
    def seek(self, offset: int, whence: int = 0, /) -> int: ...
    def truncate(self, size: int | None = None, /) -> int: ...


@dataclass
class BlobPlan:
    """The result of indexing: nodes in index order and the CSR import tree."""

    nodes: list[Node | None]              # None stands for the merged host library (_lib)
    dso_modules: list[HostNode]           # what _lib holds, in discovery order
    row_ptr: list[int] = field(default_factory=list)
    child_indices: list[int] = field(default_factory=list)

    @property
    def type_keys(self) -> list[str]:
        return [LIB_TYPE_KEY if n is None else n.type_key for n in self.nodes]


class _FramedPayload:
    """A device module's payload with its code in code frames: encoded once, then its size and
    chunks answered from that (code is small beside weights, which are never framed)."""

    def __init__(self, node: Any, frames: CodeFrames) -> None:
        self.node = node
        self.type_key = node.type_key
        self._frames = frames
        self._chunks: list[bytes] | None = None

    def payload_chunks(self) -> list[bytes]:
        if self._chunks is None:
            self._chunks = [bytes(memoryview(c).cast("B"))
                            for c in self.node.payload_chunks(code=self._frames)]
        return self._chunks

    def payload_size(self) -> int:
        return sum(len(c) for c in self.payload_chunks())


class ModuleSerializer:
    """Indexes the tree under |root| and writes its blob; with |compress_code| (a zstd level,
    0 for none) each device module's code is written in code frames; |extras| (metadata,
    self-tests) go into the index (format 1.2)."""

    def __init__(self, root: Node, compress_code: int = 0,
                 extras: IndexExtras = NO_EXTRAS) -> None:
        self.root = root
        self.plan = self._index(root)
        self.compress_code = compress_code
        self.extras = extras
        self._frames = CodeFrames(compress_code) if compress_code else None
        self._framed: dict[int, _FramedPayload] = {}  # by id of the node

    def payload_source(self, index: int) -> Any:
        """What writes module |index|'s payload (``payload_size``, ``payload_chunks``): the
        node, or its framed payload when the export compresses code. (Asked each time: an
        export with weights= replaces const nodes by references after indexing.)"""
        node = self.plan.nodes[index]
        if self._frames is None or not getattr(node, "frames_code", False):
            return node
        framed = self._framed.get(id(node))
        if framed is None or framed.node is not node:
            framed = self._framed[id(node)] = _FramedPayload(node, self._frames)
        return framed

    def entry_flags(self, index: int) -> int:
        framed = isinstance(self.payload_source(index), _FramedPayload)
        return ENTRY_CODE_FRAMES if framed else 0

    @staticmethod
    def _index(root: Node) -> BlobPlan:
        dso: list[HostNode] = []
        dso_ids: set[int] = set()
        valid_keys: set[str] = set()  # each type key checked once, not once per module
        for m in walk(root):
            if m.is_dso_exportable:
                dso.append(m)
                dso_ids.add(id(m))
            elif not m.is_binary_serializable:
                raise ArgumentError(
                    f"cannot export a {m.type_key or type(m).__name__} module: it is neither "
                    "compiled into the library (DSO-exportable) nor binary-serializable"
                )
            elif m.type_key not in valid_keys:
                _check_type_key(m.type_key)
                valid_keys.add(m.type_key)
        lib_node = object()  # the merged host library's node identity

        def node(m: Node) -> object:
            return lib_node if id(m) in dso_ids else m

        def children(n: object) -> Sequence[object]:
            if n is lib_node:
                members: Sequence[Any] = dso
            elif not imports_of(n):
                return ()  # a leaf, as most modules of a large tree are
            else:
                members = (n,)
            out: list[object] = []
            seen: set[int] = set()
            for member in members:  # Nodes: the merged host library's node is not a member
                for child in imports_of(member):
                    c = node(child)
                    if c is not n and id(c) not in seen:
                        seen.add(id(c))
                        out.append(c)
            return out

        # Preorder DFS: index on first visit, children in import order.
        order: list[object] = []
        index: dict[int, int] = {}
        kids: list[Sequence[object]] = []  # children(order[i]), found once
        stack = [node(root)]
        while stack:
            n = stack.pop()
            if id(n) in index:
                continue
            index[id(n)] = len(order)
            order.append(n)
            found = children(n)
            kids.append(found)
            if found:
                stack.extend(reversed([c for c in found if id(c) not in index]))

        row_ptr: list[int] = [0]
        child_indices: list[int] = []
        for found in kids:
            if found:
                child_indices.extend([index[id(c)] for c in found])
            row_ptr.append(len(child_indices))
        _check_acyclic(order, row_ptr, child_indices)
        nodes = [None if n is lib_node else n for n in order]
        # Every node but the merged host library's (None now) is a Node.
        return BlobPlan(nodes, dso, row_ptr, child_indices)  # type: ignore[arg-type]

    def write_blob(self, path: str | os.PathLike[str], alignment: int = ALIGNMENT) -> int:
        """Write the blob to the file |path|; returns its size."""
        with open(path, "w+b") as f:
            return self.write_blob_to(f, 0, alignment, label=os.path.basename(path))

    def write_blob_to(self, f: BlobFile, base: int, alignment: int = ALIGNMENT, *,
                      label: str = "the blob") -> int:
        """Write the blob into the seekable file |f| starting at byte |base| (e.g. inside an
        object file's section); returns its size and leaves |f| at its end.

        |alignment| (a power of two >= 64) places each payload, e.g. 4096 to let loaders map
        payloads page by page. Each payload streams from its module's buffers to the file
        once, hashed on the way; a payload identical to an earlier one (same size, checksum
        and bytes) is dropped and its entry points at the first copy. Large payloads show
        their progress (:mod:`modpack.progress`), |label| (the library's name) naming them.
        """
        if alignment < ALIGNMENT or alignment & (alignment - 1):
            raise ArgumentError(f"payload_alignment must be a power of two >= {ALIGNMENT}")
        plan = self.plan
        entries = [EntryRecord(k, flags=self.entry_flags(i)) for i, k in enumerate(plan.type_keys)]
        layout = IndexLayout.plan(plan.type_keys, len(plan.child_indices), self.extras)
        sources = [self.payload_source(i) for i in range(len(plan.nodes))]
        sizes = [0 if n is None else n.payload_size() for n in sources]
        # (size, checksum, entry flags) -> offset of the first copy
        stored: dict[tuple[int, int, int], int] = {}

        with timed(export_log, "write the blob: %d modules, %d payload bytes",
                   len(plan.nodes), sum(sizes)), \
                Progress("export", label, sum(sizes)) as progress:
            f.seek(base)
            f.write(bytes(layout.index_size))
            cursor = layout.index_size
            for entry, node, size in zip_strict(entries, sources, sizes):
                if node is None:
                    continue
                offset = align_up(cursor, alignment)
                f.write(bytes(offset - cursor))
                digest = _stream_payload(node, size, f, progress)
                entry.payload_size, entry.payload_checksum = size, digest
                first = stored.get((size, digest, entry.flags))
                if first is not None and _same_bytes(f, base + first, base + offset, size):
                    entry.payload_offset = first
                    f.seek(base + cursor)
                    f.truncate()
                    continue
                stored.setdefault((size, digest, entry.flags), offset)
                entry.payload_offset = offset
                cursor = offset + size
            f.seek(base)
            f.write(pack_index(layout, entries, plan.row_ptr, plan.child_indices, cursor,
                               WRITER_VERSION))
            f.seek(base + cursor)
        return cursor


def _stream_payload(node: Any, size: int, f: BlobFile, progress: Progress) -> int:
    """Write |node|'s payload chunks to |f| as they come; returns their XXH3-64."""
    if size <= SMALL_PAYLOAD:  # joined: one hash and one write instead of one per chunk
        data = b"".join(node.payload_chunks())
        if len(data) != size:
            _size_mismatch(node, len(data), size)
        f.write(data)
        progress(size)
        return xxhash.xxh3_64_intdigest(data)
    digest = xxhash.xxh3_64()
    written = 0
    for chunk in node.payload_chunks():
        view = memoryview(chunk).cast("B")
        digest.update(view)
        f.write(view)
        written += len(view)
        progress(len(view))
    if written != size:
        _size_mismatch(node, written, size)
    return digest.intdigest()


def _size_mismatch(node: Any, written: int, size: int) -> None:
    raise ModpackError(
        f"the {node.type_key} module wrote {written} payload bytes but declared {size}; "
        "its payload_size() and payload_chunks() disagree"
    )


def _same_bytes(f: BlobFile, a: int, b: int, size: int, chunk: int = 1 << 20) -> bool:
    """Compare two regions of |f| in bounded memory (guards dedup against hash collisions)."""
    for start in range(0, size, chunk):
        n = min(chunk, size - start)
        f.seek(a + start)
        left = f.read(n)
        f.seek(b + start)
        if left != f.read(n):
            f.seek(b + size)
            return False
    f.seek(b + size)
    return True


def _check_type_key(key: str) -> None:
    if not isinstance(key, str) or not type_key_is_valid(key):
        raise ArgumentError(
            f"invalid type key {key!r}: use 1-{MAX_TYPE_KEY} characters of [A-Za-z0-9_.-], "
            "not starting with '_' (reserved for _lib)"
        )


def _check_acyclic(order: list[object], row_ptr: list[int], child_indices: list[int]) -> None:
    """Refuse a tree in which merging the host modules closed a cycle."""
    state = [0] * len(order)  # 0 new, 1 on path, 2 done
    for start in range(len(order)):
        if state[start]:
            continue
        stack = [(start, row_ptr[start])]
        state[start] = 1
        while stack:
            n, edge = stack[-1]
            if edge == row_ptr[n + 1]:
                state[n] = 2
                stack.pop()
                continue
            stack[-1] = (n, edge + 1)
            c = child_indices[edge]
            if state[c] == 1:
                raise ArgumentError(
                    "cannot export: the host modules (c, llvm) merge into one library, and here "
                    "a module they import imports host code again, which would make a cycle in "
                    "the import tree; move that host code into the importing side or make the "
                    "device module not import it"
                )
            if state[c] == 0:
                state[c] = 1
                stack.append((c, row_ptr[c]))
