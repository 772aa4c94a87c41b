"""The kernel cache from Python: what this process's lookups found, the folder's entries, and
pruning them. The cache itself lives in the C runtime (``files/kernel_cache.c``; modpack.h
says what it keeps and when): a device's first launch asks it, and ``load_module(...,
kernel_cache=False)`` or ``MODPACK_KERNEL_CACHE=""`` turns it off. ``modpack cache`` is the
command over these functions."""

from __future__ import annotations

import json
import re
from typing import Any

from ..errors import ArgumentError
from .binding import check, ffi, lib

__all__ = ["kernel_cache_entries", "kernel_cache_stats", "parse_size", "prune_kernel_cache"]

_STATS = ("hits", "misses", "stores", "ignored", "refused", "off", "waited")


def kernel_cache_stats() -> dict[str, int]:
    """What this process's device builds found in the cache, by count: ``hits`` (loaded
    instead of compiling), ``misses`` (compiled, then stored), ``stores``, ``ignored``
    (entries refused: damaged, truncated, foreign, not this user's), ``refused`` (entries the
    driver did not take), ``off`` (builds with the cache off), ``waited`` (misses that waited
    for another process building the same code)."""
    stats = ffi.new("mp_kernel_cache_stats_t*")
    stats.struct_size = ffi.sizeof("mp_kernel_cache_stats_t")
    check(lib.mp_kernel_cache_stats(stats))
    return {name: int(getattr(stats, name)) for name in _STATS}


def kernel_cache_entries() -> dict[str, Any]:
    """The cache's folder and entries, read and checked, never changed: ``{"folder",
    "enabled", "reason", "max_size", "total_size", "entries": [{"name", "kind", "size",
    "data_size", "last_used", "valid", "problem"}]}`` (``last_used`` in seconds since the
    epoch; ``problem`` says why an entry that is not ``valid`` would be ignored)."""
    needed = ffi.new("uint64_t*")
    capacity = 1 << 16
    while True:
        buffer = ffi.new("char[]", capacity)
        check(lib.mp_kernel_cache_list(buffer, capacity, needed))
        if needed[0] < capacity:
            report: dict[str, Any] = json.loads(ffi.string(buffer).decode("utf-8", "replace"))
            return report
        capacity = needed[0] + 1


def prune_kernel_cache(max_size: int | None = None) -> tuple[int, int]:
    """Remove entries, least recently used first, until they take at most ``max_size`` bytes
    (None: the cache's bound, ``$MODPACK_KERNEL_CACHE_MAX``; 0: every entry), and every entry
    a lookup would ignore. Returns (entries removed, bytes freed)."""
    if max_size is None:
        max_size = int(kernel_cache_entries()["max_size"])
    if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 0:
        raise ArgumentError(f"max_size is a number of bytes (0 or more), not {max_size!r}")
    removed = ffi.new("uint64_t*")
    freed = ffi.new("uint64_t*")
    check(lib.mp_kernel_cache_prune(max_size, removed, freed))
    return int(removed[0]), int(freed[0])


_SIZE = re.compile(r"(\d+)\s*([KMG]i?B?|B)?", re.IGNORECASE)


def parse_size(text: str) -> int:
    """Bytes from ``"512M"``, ``"1G"``, ``"1GiB"``, ``"4096"`` (K, M and G are powers of 1024,
    as ``$MODPACK_KERNEL_CACHE_MAX`` reads them)."""
    match = _SIZE.fullmatch(text.strip())
    if not match:
        raise ArgumentError(f"{text!r} is not a size: give bytes, or a number with K, M or G "
                            "(powers of 1024), e.g. 512M or 1G")
    unit = (match.group(2) or "B")[0].upper()
    return int(match.group(1)) << {"B": 0, "K": 10, "M": 20, "G": 30}[unit]
