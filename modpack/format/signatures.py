"""Signing a sealed library (``modpack sign``): an Ed25519 signature over the SHA-256 of every
byte of the sealed file, appended in a signature block after the seal (layout in
``csrc/include/modpack/format.h``; the runtime is the reader and verifier).

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

from ..errors import ArgumentError, FormatError
from ..runtime.binding import check, ffi, lib
from .layout import check_struct

__all__ = ["RECORD", "TRAILER", "key_id", "read_signatures", "sign_library", "signature_block"]

RECORD = check_struct(struct.Struct("<8sII32s64s16s"), "mp_signature_v1_t")
TRAILER = check_struct(struct.Struct("<QQII8s"), "mp_signatures_trailer_v1_t")
_RECORD_MAGIC = ffi.string(lib.MP_SIGNATURE_MAGIC).ljust(8, b"\0")
_TRAILER_MAGIC = ffi.string(lib.MP_SIGNATURES_MAGIC)
_CONTEXT = ffi.string(lib.MP_SIGNATURE_CONTEXT)


def read_signatures(path: str | os.PathLike, keys: Any = None,
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
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem, password=None)
    except (ValueError, TypeError) as exc:
        raise ArgumentError(f"not an unencrypted PEM private key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise ArgumentError("the key is not an Ed25519 key: make one with `openssl genpkey "
                            "-algorithm ed25519 -out key.pem`")
    return key


def sign_library(path: str | os.PathLike, private_key: str | os.PathLike | bytes) -> str:
    """Add a signature by |private_key| (PEM bytes or a PEM file's path) to the sealed library
    at |path|, replacing an earlier one by the same key; the file is replaced atomically.
    Returns the key id (hex) the signature records."""
    from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

    path = Path(path)
    pem = private_key if isinstance(private_key, bytes) else Path(private_key).read_bytes()
    key = _private_key(pem)
    # Only a whole library is signed: its seal must hold (the runtime finds it before a block).
    check(lib.mp_seal_check_file(os.fsencode(path), ffi.new("mp_seal_v1_t*")))
    public = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)  # type: ignore[attr-defined]
    signer = key_id(public)
    with open(path, "rb") as source, tempfile.NamedTemporaryFile(
            dir=path.parent, prefix=f".{path.name}.", delete=False) as target:
        try:
            signed_size, records = signature_block(source)
            digest = hashlib.sha256()
            source.seek(0)
            copied = 0
            while copied < signed_size:  # one pass: hashed as it is copied
                chunk = source.read(min(signed_size - copied, 1 << 24))
                if not chunk:
                    raise FormatError(f"{path} shrank while it was being signed")
                digest.update(chunk)
                target.write(chunk)
                copied += len(chunk)
            signature = key.sign(_CONTEXT + digest.digest())  # type: ignore[attr-defined]
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
