"""The local content-addressed store that pulls fill and loads read: ``$MODPACK_CACHE``, else
``$XDG_CACHE_HOME/modpack/store``, else ``~/.cache/modpack/store``.

    blobs/sha256/<hex>        a layer, manifest or config, named by its digest, read-only
    stamps/sha256/<hex>.json  what was verified of that blob: its digest against the file's
                              identity (device, inode, size, modification time)
    partial/<hex>.part        a download under way (or interrupted: the next pull resumes it)
    refs/<key>.json           what a reference resolved to when last pulled: the manifest,
                              the variant's device, its layers by file name, the OMS bundle
    oci-layout                the OCI image layout's marker (blobs/ is laid out as one)

A blob is published by renaming a complete, verified file into blobs/, so nothing half
downloaded is ever there. Loads read blobs in place (the weights are mapped from the store,
shared by every library that names the same layer). The stamp lets a second load skip hashing
a blob: it holds while the file is the one that was hashed (a changed file has another
modification time or size, or is another inode), and the blob is hashed again otherwise.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, FormatError, ModpackOSError

__all__ = ["Store", "default_root", "list_entries", "prune"]

_HASH_CHUNK = 8 << 20


def default_root() -> Path:
    """The store's folder: ``$MODPACK_CACHE``, else the user's cache folder's modpack/store."""
    explicit = os.environ.get("MODPACK_CACHE")
    if explicit:
        return Path(explicit)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "modpack" / "store"


def _hex(digest: str) -> str:
    algorithm, _, value = digest.partition(":")
    if algorithm != "sha256" or len(value) != 64 or not all(c in "0123456789abcdef"
                                                            for c in value):
        raise FormatError(f"{digest!r} is not a sha256 digest: a manifest names its blobs by "
                          "sha256:<64 hex digits>")
    return value


def disk_error(exc: OSError, root: Path, what: str) -> ModpackOSError:
    """An OSError while writing the store, said in the store's terms (a full disk names the
    store and how to make room)."""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return ModpackOSError(
            f"no space left on device for {what} in the store {root}: nothing was published "
            f"(what was downloaded so far is kept to resume); free space (`modpack cache "
            f"prune`) or point MODPACK_CACHE at a larger disk, and pull again")
    return ModpackOSError(f"cannot write {what} in the store {root}: {exc.strerror or exc}")


class Store:
    """The store at |root| (default_root() when None); folders are made on first write."""

    def __init__(self, root: str | os.PathLike[str] | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    # ---- paths ------------------------------------------------------------------------------

    def blob_path(self, digest: str) -> Path:
        return self.root / "blobs" / "sha256" / _hex(digest)

    def partial_path(self, digest: str) -> Path:
        return self.root / "partial" / f"{_hex(digest)}.part"

    def _stamp_path(self, digest: str) -> Path:
        return self.root / "stamps" / "sha256" / f"{_hex(digest)}.json"

    def _ref_path(self, reference: str) -> Path:
        key = hashlib.sha256(reference.encode()).hexdigest()[:32]
        return self.root / "refs" / f"{key}.json"

    def ensure(self) -> None:
        """Make the store's folders (and its oci-layout marker)."""
        try:
            for sub in ("blobs/sha256", "stamps/sha256", "partial", "refs"):
                (self.root / sub).mkdir(parents=True, exist_ok=True)
            marker = self.root / "oci-layout"
            if not marker.exists():
                _write_atomic(marker, b'{"imageLayoutVersion":"1.0.0"}')
        except OSError as exc:
            raise disk_error(exc, self.root, "its folders") from None

    # ---- blobs ------------------------------------------------------------------------------

    def has(self, digest: str, size: int) -> bool:
        """Whether blob |digest| is published with |size| bytes (not whether it was hashed
        since: see verified())."""
        try:
            return self.blob_path(digest).stat().st_size == size
        except OSError:
            return False

    def publish(self, partial: Path, digest: str) -> Path:
        """Move a complete, verified download into blobs/ (read-only) and stamp it."""
        target = self.blob_path(digest)
        try:
            os.chmod(partial, 0o444)
            os.replace(partial, target)
            _fsync_folder(target.parent)
        except OSError as exc:
            raise disk_error(exc, self.root, f"blob {digest}") from None
        self.stamp(digest)
        return target

    def put_bytes(self, digest: str, data: bytes) -> Path:
        """Publish a small blob (a manifest, config or bundle) held in memory, after checking
        its digest."""
        if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
            raise FormatError(f"blob {digest} does not match its digest: refused")
        self.ensure()
        if self.has(digest, len(data)):
            return self.blob_path(digest)
        partial = self.partial_path(digest)
        try:
            with open(partial, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            _remove(partial)
            raise disk_error(exc, self.root, f"blob {digest}") from None
        return self.publish(partial, digest)

    def stamp(self, digest: str) -> None:
        """Record that blob |digest| was hashed and matched, with the file's identity now."""
        st = self.blob_path(digest).stat()
        record = {"digest": digest, "device": st.st_dev, "inode": st.st_ino,
                  "size": st.st_size, "mtime_ns": st.st_mtime_ns, "verified": time.time()}
        try:
            _write_atomic(self._stamp_path(digest), json.dumps(record).encode())
        except OSError as exc:
            raise disk_error(exc, self.root, f"the stamp of {digest}") from None

    def stamped(self, digest: str) -> bool:
        """Whether blob |digest|'s stamp holds: the file is the one hashed when stamped."""
        try:
            record = json.loads(self._stamp_path(digest).read_bytes())
            st = self.blob_path(digest).stat()
        except (OSError, ValueError):
            return False
        return bool(record.get("digest") == digest and record.get("device") == st.st_dev
                    and record.get("inode") == st.st_ino and record.get("size") == st.st_size
                    and record.get("mtime_ns") == st.st_mtime_ns)

    def verified(self, digest: str) -> bool:
        """Whether blob |digest| is in the store with its content: by its stamp, else by
        hashing it (and stamping it when it matches). A blob that does not match is removed
        (a later pull fetches it again)."""
        if self.stamped(digest):
            return True
        path = self.blob_path(digest)
        if not path.is_file():
            return False
        if file_digest(path) == digest:
            self.stamp(digest)
            return True
        _remove(path)
        _remove(self._stamp_path(digest))
        return False

    # ---- references ---------------------------------------------------------------------------

    def write_ref(self, reference: str, record: dict[str, Any]) -> None:
        self.ensure()
        try:
            _write_atomic(self._ref_path(reference),
                          json.dumps({"reference": reference, **record}, indent=1).encode())
        except OSError as exc:
            raise disk_error(exc, self.root, f"the record of {reference}") from None

    def read_ref(self, reference: str) -> dict[str, Any] | None:
        try:
            record: dict[str, Any] = json.loads(self._ref_path(reference).read_bytes())
        except (OSError, ValueError):
            return None
        return record if record.get("reference") == reference else None

    def refs(self) -> list[dict[str, Any]]:
        out = []
        for path in sorted((self.root / "refs").glob("*.json")):
            try:
                record = json.loads(path.read_bytes())
            except (OSError, ValueError):
                continue
            if isinstance(record, dict) and "reference" in record:
                out.append(record)
        return out


def file_digest(path: Path) -> str:
    """sha256:<hex> of the file at |path|, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_HASH_CHUNK):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def _referenced(record: dict[str, Any]) -> set[str]:
    digests = {record.get("manifest"), record.get("index"), record.get("config"),
               record.get("bundle"), record.get("bundle_manifest")}
    digests |= {layer.get("digest") for layer in record.get("layers", [])}
    return {d for d in digests if isinstance(d, str)}


def list_entries(root: str | os.PathLike[str] | None = None) -> list[dict[str, Any]]:
    """What the store holds, for ``modpack cache list``: one entry per pulled reference
    (its manifest, device, layers and the bytes they take, shared ones counted once per
    reference), then one for blobs no reference names and one for interrupted downloads."""
    store = Store(root)
    entries: list[dict[str, Any]] = []
    named: set[str] = set()
    for record in store.refs():
        digests = _referenced(record)
        named |= digests
        size = sum(_size(store.blob_path(d)) for d in digests)
        entries.append({"kind": "reference", "reference": record["reference"],
                        "manifest": record.get("manifest"), "device": record.get("device"),
                        "files": [layer.get("title") for layer in record.get("layers", [])],
                        "bytes": size, "pulled": record.get("pulled")})
    blobs = sorted((store.root / "blobs" / "sha256").glob("*"))
    loose = [p for p in blobs if f"sha256:{p.name}" not in named]
    if loose:
        entries.append({"kind": "unreferenced", "blobs": len(loose),
                        "bytes": sum(_size(p) for p in loose)})
    partial = sorted((store.root / "partial").glob("*.part"))
    if partial:
        entries.append({"kind": "partial", "downloads": len(partial),
                        "bytes": sum(_size(p) for p in partial)})
    return entries


def prune(root: str | os.PathLike[str] | None = None, *,
          references: Iterable[str] = (), everything: bool = False) -> dict[str, int]:
    """Remove from the store: the records of |references| (``oci://...`` as pulled), then
    every blob no remaining record names, interrupted downloads and stale stamps; with
    ``everything=True``, all of it. Returns {"blobs", "bytes", "references"} removed. Files a
    live load maps stay readable to it (a removed name does not unmap them)."""
    store = Store(root)
    removed = {"blobs": 0, "bytes": 0, "references": 0}
    wanted = set(references)
    known = {r["reference"] for r in store.refs()}
    unknown = sorted(wanted - known)
    if unknown:
        raise ArgumentError(f"the store {store.root} has no reference {unknown[0]} (it has: "
                            f"{', '.join(sorted(known)) or 'none'})")
    for record in store.refs():
        if everything or record["reference"] in wanted:
            _remove(store._ref_path(record["reference"]))
            removed["references"] += 1
    keep: set[str] = set()
    for record in store.refs():
        keep |= _referenced(record)
    for path in sorted((store.root / "blobs" / "sha256").glob("*")):
        if f"sha256:{path.name}" not in keep:
            removed["bytes"] += _size(path)
            removed["blobs"] += 1
            _remove(path)
    for path in (store.root / "partial").glob("*"):
        removed["bytes"] += _size(path)
        _remove(path)
    for path in (store.root / "stamps" / "sha256").glob("*.json"):
        if not (store.root / "blobs" / "sha256" / path.name[:-5]).exists():
            _remove(path)
    return removed


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ModpackOSError(f"cannot remove {path} from the store: {exc.strerror}") from None


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(temporary, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(temporary, path)
    except OSError:
        try:
            temporary.unlink()
        except OSError:
            pass
        raise


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
