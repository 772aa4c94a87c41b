"""Trusted keys as the runtime takes them: the Ed25519 public keys a caller trusts, read from
PEM (by the runtime) or given raw, for signed loads (``trusted_keys=``) and ``verify``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Union

from ..errors import ArgumentError
from .binding import error_from_status, ffi, lib

__all__ = ["TrustedKey", "trusted_keys_array"]

_MAX_KEYS = 16

TrustedKey = Union[str, os.PathLike[str], bytes]
"""A trusted public key: PEM text (``bytes``), the path of a PEM file, or 32 raw bytes."""

def trusted_keys_array(keys: Iterable[TrustedKey]) -> Any:
    """The keys as the runtime's ``mp_trusted_key_t[]`` (PEM read by the runtime)."""
    keys = list(keys)
    if not keys or len(keys) > _MAX_KEYS:
        raise ArgumentError(f"give between 1 and {_MAX_KEYS} trusted keys, not {len(keys)}")
    out = ffi.new("mp_trusted_key_t[]", len(keys))
    for i, key in enumerate(keys):
        if isinstance(key, bytes) and len(key) == 32 and not key.startswith(b"-----"):
            ffi.memmove(out[i].public_key, key, 32)
            continue
        if isinstance(key, bytes):
            pem = key
        elif isinstance(key, (str, os.PathLike)):
            try:
                pem = Path(key).read_bytes()
            except OSError as exc:
                raise ArgumentError(f"cannot read the trusted key {key}: {exc.strerror}") from None
        else:
            raise ArgumentError(f"a trusted key is PEM bytes, a PEM file's path or 32 raw "
                                f"bytes, not {type(key).__name__}")
        status = lib.mp_trusted_key_from_pem(pem, len(pem), out + i)
        if status != 0:
            error = error_from_status(status)
            raise type(error)(f"trusted key {i + 1}: {error}") from None
    return out
