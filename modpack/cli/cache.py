"""``modpack cache list|prune``: the stores modpack keeps on this machine, one command for all.

Each store is one :class:`Store` in ``STORES``: its name (``--store NAME``), what it keeps, and
how to list and prune it. Today there is one, the kernel cache (what devices compiled from
libraries' code: modpack.h, ``runtime/kernel_cache.py``); a store added later (a registry's
layers, say) is one more entry, and both commands take it without other change.

    modpack cache list [--json] [--store kernels]
    modpack cache prune [--max-size SIZE | --all] [--store kernels]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["STORES", "Store", "add_cache"]


@dataclass(frozen=True)
class Store:
    """One store on disk.

    entries: its folder and entries, ``{"folder", "enabled", "reason", "max_size", "total_size",
        "entries": [{"name", "kind", "size", "last_used", "valid", "problem"}]}``.
    prune: given a size in bytes (None: the store's own bound; 0: everything), removes entries
        least recently used first, and broken ones; returns (entries removed, bytes freed).
    """

    name: str
    what: str
    entries: Callable[[], dict[str, Any]]
    prune: Callable[[int | None], tuple[int, int]]


def _kernel_list() -> dict[str, Any]:
    from ..runtime.kernel_cache import kernel_cache_entries

    return kernel_cache_entries()


def _kernel_prune(max_size: int | None) -> tuple[int, int]:
    from ..runtime.kernel_cache import prune_kernel_cache

    return prune_kernel_cache(max_size)


STORES: tuple[Store, ...] = (
    Store("kernels", "what devices compiled from libraries' code ($MODPACK_KERNEL_CACHE)",
          _kernel_list, _kernel_prune),
)


def add_cache(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cache",
        help="list or prune what modpack keeps on this machine (compiled kernels)",
        description=(
            "The stores modpack keeps on this machine: "
            + "; ".join(f"{s.name}: {s.what}" for s in STORES)
            + ". `list` shows each store's folder and entries (size, last use, whether a "
            "lookup would use it); `prune` removes entries least recently used first until "
            "the store is within its bound (or --max-size), and entries that are damaged or "
            "not this user's. Exit status 0, 1 when a store cannot be read, 2 for a bad "
            "argument."
        ),
    )
    actions = p.add_subparsers(dest="action", metavar="<action>", required=True)
    listing = actions.add_parser("list", help="show each store's entries")
    listing.add_argument("--json", action="store_true", help="print them as JSON on stdout")
    pruning = actions.add_parser("prune", help="remove entries least recently used first")
    bound = pruning.add_mutually_exclusive_group()
    bound.add_argument("--max-size", metavar="SIZE",
                       help="keep at most SIZE bytes per store (512M, 1G; default: the "
                            "store's bound, $MODPACK_KERNEL_CACHE_MAX for kernels)")
    bound.add_argument("--all", action="store_true", help="remove every entry")
    for q in (listing, pruning):
        q.add_argument("--store", choices=[s.name for s in STORES],
                       help="only this store (default: every store)")
    p.set_defaults(run=_run_cache)


def _stores(name: str | None) -> list[Store]:
    return [s for s in STORES if name is None or s.name == name]


def _run_cache(args: argparse.Namespace) -> int:
    from ..errors import ArgumentError

    if args.action == "list":
        return _list(_stores(args.store), args.json)
    try:
        size = 0 if args.all else None
        if args.max_size is not None:
            from ..runtime.kernel_cache import parse_size

            size = parse_size(args.max_size)
    except ArgumentError as exc:
        print(f"modpack cache: error: {exc}", file=sys.stderr)
        return 2
    for store in _stores(args.store):
        removed, freed = store.prune(size)
        print(f"{store.name}: removed {removed} entries, {_size(freed)} freed")
    return 0


def _list(stores: list[Store], as_json: bool) -> int:
    reports = {s.name: s.entries() for s in stores}
    if as_json:
        sys.stdout.write(json.dumps(reports, indent=2) + "\n")
        return 0
    for name, r in reports.items():
        state = "on" if r["enabled"] else f"OFF: {r['reason']}"
        entries = r["entries"]
        print(f"{name}: {r['folder'] or '(no folder)'} ({state}); {len(entries)} entries, "
              f"{_size(r['total_size'])} of {_size(r['max_size'])}")
        for e in sorted(entries, key=lambda e: e["last_used"], reverse=True):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["last_used"]))
            line = f"  {e['name'][:16]}  {e['kind'] or '?':8} {_size(e['size']):>10}  {when}"
            print(line if e["valid"] else f"{line}  IGNORED: {e['problem']}")
    return 0


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"
