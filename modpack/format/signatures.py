"""Signing a sealed library or weight file (``modpack sign``): an Ed25519 signature (layout in
``csrc/include/modpack/format.h``; the runtime is the reader and verifier).

- A library sealed by its seal note (version 2) keeps its signatures in the note's slots,
  written in place, and each signs the SHA-256 of what the seal covers, payloads included
  (:mod:`.coverage`): the signatures hold as long as the seal does, through strippers too.
- Any other file gets a signature block appended after its seal. A library's signature then
  signs the SHA-256 of every byte of the sealed file; a weight file's signs its content digest
  (``csrc/include/modpack/weights.h``), which covers every array through its own digest, so
  that arrays can be checked one at a time.

Keys are PEM, as ``openssl genpkey -algorithm ed25519`` writes them; the cryptography comes from
the ``cryptography`` package, never written here.
"""

from __future__ import annotations

import hashlib
import os
import struct
import tempfile
from pathlib import Path
from typing import Any, BinaryIO

from ..errors import ArgumentError, FormatError, ModpackError
from ..extras import import_extra
from ..files.kernel_copy import copy_range
from ..progress import Progress
from ..runtime.binding import check, ffi, lib
from .coverage import SIGNATURE_SLOTS, Coverage, note_fields, read_coverage, signed_digest
from .layout import check_struct

__all__ = ["RECORD", "TRAILER", "key_id", "read_signatures", "sign_library", "signature_block",
           "signature_checks"]

RECORD = check_struct(struct.Struct("<8sII32s64s16s"), "mp_signature_v1_t")
TRAILER = check_struct(struct.Struct("<QQII8s"), "mp_signatures_trailer_v1_t")
_RECORD_MAGIC = ffi.string(lib.MP_SIGNATURE_MAGIC).ljust(8, b"\0")
_TRAILER_MAGIC = ffi.string(lib.MP_SIGNATURES_MAGIC)
_CONTEXT = ffi.string(lib.MP_SIGNATURE_CONTEXT)
_CONTEXT_V2 = ffi.string(lib.MP_SIGNATURE_CONTEXT_V2)
_SLOTS_AT = ffi.offsetof("mp_seal_note_v2_t", "signatures")
_WEIGHTS_CONTEXT = ffi.string(lib.MP_WEIGHTS_SIGNATURE_CONTEXT)
_WEIGHTS_MAGIC = ffi.string(lib.MP_WEIGHTS_MAGIC).ljust(8, b"\0")


def read_signatures(path: str | os.PathLike[str], keys: Any = None,
                    count: int = 0) -> list[dict[str, Any]]:
    """The signatures of the library at |path|, checked by the runtime against |count| trusted
    keys (an ``mp_trusted_key_t[]``; none: only listed): ``key_id`` (hex), ``trusted`` and
    ``valid`` for each. Raises FormatError for a damaged signature block."""
    infos = ffi.new("mp_signature_info_t[]", lib.MP_SIGNATURES_MAX)
    found = ffi.new("uint64_t*")
    check(lib.mp_signatures_check_file(os.fsencode(path), keys if count else ffi.NULL, count,
                                       infos, lib.MP_SIGNATURES_MAX, found))
    return [{"key_id": bytes(ffi.buffer(infos[i].key_id, 32)).hex(),
             "trusted": bool(infos[i].trusted), "valid": bool(infos[i].valid)}
            for i in range(found[0])]


def signature_checks(path: str | os.PathLike[str], keys: Any, what: str,
                     covers: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The signature rows of a ``verify`` report for the file at |path| (|what|: "library",
    "weight file"), checked against |keys| (an ``mp_trusted_key_t[]`` or None), each with what
    a signature |covers|; and the signatures themselves. Without keys the row says that nothing
    tells a tampered file from a good one: the seal and checksums catch damage, not edits."""
    rows: list[dict[str, Any]] = []

    def add(ok: bool | None, message: str | None, **extra: Any) -> None:
        rows.append({"check": "signature", "ok": ok, "covers": covers, "message": message,
                     **extra})

    try:
        signatures = read_signatures(path, keys, len(keys) if keys is not None else 0)
    except ModpackError as exc:
        add(False, str(exc))
        return rows, []
    if keys is None:
        add(None, f"not checked (no --key): the seal and checksums detect damage, not "
                  f"tampering; only a signature by a key you trust tells an altered {what} "
                  f"from a good one ({len(signatures)} signature"
                  f"{'' if len(signatures) == 1 else 's'} present)",
            key_ids=[s["key_id"] for s in signatures])
        return rows, signatures
    for sig in signatures:
        if sig["trusted"]:
            add(sig["valid"], None if sig["valid"] else
                f"does not match the {what}'s content: changed after it was signed",
                key_id=sig["key_id"])
    if not any(s["trusted"] and s["valid"] for s in signatures):
        add(False, "no signature by a trusted key" if signatures else f"the {what} is not signed")
    return rows, signatures


def key_id(public_key: bytes) -> bytes:
    """Whose signature a record is: the SHA-256 of the signer's raw public key."""
    return hashlib.sha256(public_key).digest()


def signature_block(f: BinaryIO) -> tuple[int, list[bytes]]:
    """(the signed size, the raw records) of the library open as |f|; (its size, []) when it
    is unsigned. The runtime checks blocks (load, verify); this finds one, to sign again."""
    size = f.seek(0, os.SEEK_END)
    if size < TRAILER.size:
        return size, []
    f.seek(size - TRAILER.size)
    signed_size, count, _version, _reserved, magic = TRAILER.unpack(f.read(TRAILER.size))
    if magic != _TRAILER_MAGIC:
        return size, []
    if signed_size + count * RECORD.size + TRAILER.size != size:
        raise FormatError("the library's signature block is damaged; sign the library as "
                          "exported (export it again) instead")
    f.seek(signed_size)
    block = f.read(count * RECORD.size)
    return signed_size, [block[i * RECORD.size:(i + 1) * RECORD.size] for i in range(count)]


def _private_key(pem: bytes) -> object:
    Ed25519PrivateKey = _cryptography("asymmetric.ed25519").Ed25519PrivateKey
    load_pem_private_key = _cryptography("serialization").load_pem_private_key

    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ArgumentError(f"not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ArgumentError("the key is not an Ed25519 key: make one with `openssl genpkey "
                            "-algorithm ed25519 -out key.pem`")
    return key


def _cryptography(module: str) -> Any:
    """cryptography's ``hazmat.primitives.<module>``, which signing needs (checks use the
    runtime's libcrypto)."""
    return import_extra(f"cryptography.hazmat.primitives.{module}", "sign",
                        "signing (modpack sign)")


def is_weight_file(path: str | os.PathLike[str]) -> bool:
    """Whether the file at |path| starts as a weight file does."""
    with open(path, "rb") as f:
        return f.read(8) == _WEIGHTS_MAGIC


def weight_file_digest(path: str | os.PathLike[str]) -> bytes:
    """The content digest of the weight file at |path|, after the runtime checked every array
    against its digest (a file is signed only as it is meant to be)."""
    from ..runtime.weight_files import describe_module, load_options

    options = load_options(lib.MP_LOAD_CHECK_DIGESTS)
    out = ffi.new("mp_module_t**")
    check(lib.mp_weights_load(os.fsencode(path), options.pointer, out))
    handle = ffi.gc(out[0], lib.mp_module_release)
    return bytes.fromhex(describe_module(handle)["digest"].removeprefix("sha256:"))


def sign_library(path: str | os.PathLike[str], private_key: str | os.PathLike[str] | bytes) -> str:
    """Add a signature by |private_key| (PEM bytes or a PEM file's path) to the sealed library
    or weight file at |path| (a symbolic link: the file it names), replacing an earlier one by
    the same key; the file is replaced atomically. Returns the key id (hex) the signature
    records. Above ``MODPACK_PROGRESS_MIN_BYTES`` (64 MiB), it shows its progress
    (:mod:`modpack.progress`)."""
    shown = os.fspath(path)
    path = Path(path).resolve()  # sign the file a link names, not replace the link
    with Progress("sign", shown, path.stat().st_size if path.is_file() else 0) as progress:
        return _sign(path, private_key, progress)


def _sign(path: Path, private_key: str | os.PathLike[str] | bytes, progress: Progress) -> str:
    """sign_library's work, saying how far it got to |progress|."""
    serialization = _cryptography("serialization")
    Encoding, PublicFormat = serialization.Encoding, serialization.PublicFormat
    pem = private_key if isinstance(private_key, bytes) else Path(private_key).read_bytes()
    key = _private_key(pem)
    # Only a whole file is signed: its seal must hold (the runtime finds it before a block).
    check(lib.mp_seal_check_file(os.fsencode(path), ffi.new("mp_seal_v1_t*")))
    progress.phase("seal checked")
    weights = is_weight_file(path)
    content = weight_file_digest(path) if weights else None
    if weights:
        progress.phase("content digest checked")
    # The key is cryptography's, imported only when signing (the sign extra): typed object.
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)  # type: ignore[attr-defined]
    signer = key_id(public)
    if not weights:
        with open(path, "rb") as f:
            coverage = read_coverage(f)
        if coverage is not None:  # sealed by its note: signed in a slot of it
            _sign_in_note(path, key, signer, coverage, progress)
            return signer.hex()
    with open(path, "rb") as source, tempfile.NamedTemporaryFile(
            dir=path.parent, prefix=f".{path.name}.", delete=False) as target:
        try:
            signed_size, records = signature_block(source)
            if content is not None:  # a weight file: the digest is known, the bytes are copied
                _copy(source, target, signed_size, path)
                progress(signed_size)
                message = _WEIGHTS_CONTEXT + content
            else:
                message = _CONTEXT + _copy_hashed(source, target, signed_size, path, progress)
            signature = key.sign(message)  # type: ignore[attr-defined]  # (as above)
            kept = [r for r in records if RECORD.unpack(r)[3] != signer]
            kept.append(RECORD.pack(_RECORD_MAGIC, lib.MP_SIGNATURE_ED25519, 0, signer, signature,
                                    bytes(16)))
            target.write(b"".join(kept))
            target.write(TRAILER.pack(signed_size, len(kept), lib.MP_SIGNATURES_VERSION, 0,
                                      _TRAILER_MAGIC))
        except BaseException:
            os.unlink(target.name)
            raise
    os.chmod(target.name, path.stat().st_mode & 0o7777)
    os.replace(target.name, path)
    return signer.hex()


def _sign_in_note(path: Path, key: Any, signer: bytes, coverage: Coverage,
                  progress: Progress) -> None:
    """Sign the library at |path| in a slot of its seal note (one signed by the same key before
    keeps its slot), in a copy put in place of it."""
    size = path.stat().st_size
    with open(path, "rb") as source, tempfile.NamedTemporaryFile(
            dir=path.parent, prefix=f".{path.name}.", delete=False) as target:
        try:
            _copy(source, target, size, path)
            target.flush()
            progress(size)
            with open(target.name, "r+b") as copy:
                slots = note_fields(copy, coverage)[-1]
                records = [slots[i * RECORD.size:(i + 1) * RECORD.size]
                           for i in range(SIGNATURE_SLOTS)]
                empty = bytes(RECORD.size)
                free = [i for i, r in enumerate(records)
                        if r != empty and RECORD.unpack(r)[3] == signer]
                free += [i for i, r in enumerate(records) if r == empty]
                if not free:
                    raise ModpackError(
                        f"{path} already carries {SIGNATURE_SLOTS} signatures, as many as its "
                        "seal holds: export it again to sign it with other keys")
                message = _CONTEXT_V2 + signed_digest(copy, coverage)
                record = RECORD.pack(_RECORD_MAGIC, lib.MP_SIGNATURE_ED25519, 0, signer,
                                     key.sign(message), bytes(16))
                copy.seek(coverage.note + _SLOTS_AT + free[0] * RECORD.size)
                copy.write(record)
        except BaseException:
            os.unlink(target.name)
            raise
    os.chmod(target.name, path.stat().st_mode & 0o7777)
    os.replace(target.name, path)


def _copy_hashed(source: BinaryIO, target: Any, size: int, path: Path,
                 progress: Progress) -> bytes:
    """Copy the first |size| bytes of |source| to |target|, hashing them on the way; returns
    their SHA-256."""
    digest = hashlib.sha256()
    source.seek(0)
    copied = 0
    while copied < size:  # one pass: hashed as it is copied
        chunk = source.read(min(size - copied, 1 << 24))
        if not chunk:
            raise FormatError(f"{path} shrank while it was being signed")
        digest.update(chunk)
        target.write(chunk)
        copied += len(chunk)
        progress(len(chunk))
    return digest.digest()


def _copy(source: BinaryIO, target: Any, size: int, path: Path) -> None:
    """Copy the first |size| bytes of |source| to the new file |target| in the kernel (a weight
    file may be as large as a model: no pass through Python), its holes left holes."""
    target.flush()
    try:
        copy_range(source.fileno(), target.fileno(), 0, 0, size, skip_holes=True)
    except FormatError:
        raise FormatError(f"{path} shrank while it was being signed") from None
    target.truncate(size)  # a hole at its end is still part of it
    target.seek(size)
