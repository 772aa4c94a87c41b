"""``modpack cache list|prune``: the stores modpack keeps on this machine, one command for all.

Each store is one :class:`Store` in ``STORES``: its name (``--store NAME``), what it keeps, how
to list it and how to prune it. Two today: ``layers``, what pulls from registries left
(``$MODPACK_CACHE``, ``oci/store.py``), and ``kernels``, what devices compiled from libraries'
code (``$MODPACK_KERNEL_CACHE``, ``runtime/kernel_cache.py``). Another store is one more entry,
and both commands take it without other change.

    modpack cache list [--json] [--store NAME]
    modpack cache prune [REFERENCE ...] [--all | --max-size SIZE] [--store NAME]

``prune`` with nothing else tidies every store (layers: blobs no pulled reference names,
interrupted downloads; kernels: down to its bound, and entries a lookup would ignore);
references (``oci://...``) forget pulled references, so they reach the layers store only;
``--max-size`` is a size bound, which the kernel cache has and the layers store has not.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..tools.json_schema import dumps

__all__ = ["STORES", "PruneRequest", "Store", "add_cache"]


@dataclass(frozen=True)
class PruneRequest:
    """What ``modpack cache prune`` was asked: everything, down to a size, or references."""

    everything: bool = False
    max_size: int | None = None  # bytes; None: the store's own bound
    references: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Store:
    """One store on disk.

    entries: its state as JSON, ``{"folder", "entries": [...], ...}`` (each store's entries
        are its own).
    show: the human-readable lines of that state.
    prune: carries out a request and returns the line that says what was removed.
    takes: whether the store takes a request (``--max-size``, references).
    """

    name: str
    what: str
    entries: Callable[[], dict[str, Any]]
    show: Callable[[dict[str, Any]], list[str]]
    prune: Callable[[PruneRequest], str]
    takes: Callable[[PruneRequest], bool]


# ---- kernels --------------------------------------------------------------------------------


def _kernel_entries() -> dict[str, Any]:
    from ..runtime.kernel_cache import kernel_cache_entries

    return kernel_cache_entries()


def _kernel_show(r: dict[str, Any]) -> list[str]:
    state = "on" if r["enabled"] else f"OFF: {r['reason']}"
    entries = r["entries"]
    lines = [f"kernels: {r['folder'] or '(no folder)'} ({state}); {len(entries)} entries, "
             f"{_size(r['total_size'])} of {_size(r['max_size'])}"]
    for e in sorted(entries, key=lambda e: e["last_used"], reverse=True):
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(e["last_used"]))
        line = f"  {e['name'][:16]}  {e['kind'] or '?':8} {_size(e['size']):>10}  {when}"
        lines.append(line if e["valid"] else f"{line}  IGNORED: {e['problem']}")
    return lines


def _kernel_prune(request: PruneRequest) -> str:
    from ..runtime.kernel_cache import prune_kernel_cache

    removed, freed = prune_kernel_cache(0 if request.everything else request.max_size)
    return f"kernels: removed {removed} entries, {_size(freed)} freed"


# ---- layers ---------------------------------------------------------------------------------


def _layer_entries() -> dict[str, Any]:
    from ..oci.store import default_root, list_entries

    return {"folder": str(default_root()), "entries": list_entries()}


def _layer_show(r: dict[str, Any]) -> list[str]:
    lines = [f"layers: {r['folder']}"]
    for e in r["entries"]:
        if e["kind"] == "reference":
            lines.append(f"  {e['reference']}  {e['bytes']} bytes  {', '.join(e['files'])}"
                         f"{'  (' + e['device'] + ')' if e.get('device') else ''}")
        elif e["kind"] == "unreferenced":
            lines.append(f"  (no reference)  {e['blobs']} blobs, {e['bytes']} bytes")
        else:
            lines.append(f"  (interrupted)  {e['downloads']} downloads, {e['bytes']} bytes")
    if not r["entries"]:
        lines.append("  (empty)")
    return lines


def _layer_prune(request: PruneRequest) -> str:
    from ..oci.store import default_root, prune

    removed = prune(references=request.references, everything=request.everything)
    return (f"layers: removed {removed['references']} references and {removed['blobs']} blobs "
            f"({removed['bytes']} bytes) from {default_root()}")


STORES: tuple[Store, ...] = (
    Store("layers", "what pulls from registries left ($MODPACK_CACHE)", _layer_entries,
          _layer_show, _layer_prune, lambda r: r.max_size is None),
    Store("kernels", "what devices compiled from libraries' code ($MODPACK_KERNEL_CACHE)",
          _kernel_entries, _kernel_show, _kernel_prune, lambda r: not r.references),
)


def add_cache(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "cache",
        help="list or prune what modpack keeps on this machine (pulled layers, compiled "
             "kernels)",
        description=(
            "The stores modpack keeps on this machine: "
            + "; ".join(f"{s.name}, {s.what}" for s in STORES)
            + ". `list` shows each store's folder and entries; `prune` tidies every store "
            "(layers no pulled reference names and interrupted downloads; kernels least "
            "recently used first down to the bound, and entries that are damaged or not this "
            "user's), forgets the pulled REFERENCEs given first (layers only), and with --all "
            "empties them. Exit status 0, 1 when a store cannot be read, 2 for a bad argument."
        ),
    )
    actions = p.add_subparsers(dest="cache_action", metavar="list|prune")
    listing = actions.add_parser("list", help="what each store holds")
    listing.add_argument("--json", action="store_true",
                         help="as JSON: {schema_version, store name: {folder, entries, "
                              "...}} (docs/json.md)")
    pruning = actions.add_parser("prune", help="remove what nothing needs")
    pruning.add_argument("references", nargs="*", metavar="REFERENCE",
                         help="forget these pulled references first (oci://...; layers only)")
    bound = pruning.add_mutually_exclusive_group()
    bound.add_argument("--all", action="store_true", help="empty the stores")
    bound.add_argument("--max-size", metavar="SIZE",
                       help="kernels: keep at most SIZE bytes (512M, 1G; default "
                            "$MODPACK_KERNEL_CACHE_MAX)")
    for q in (listing, pruning):
        q.add_argument("--store", choices=[s.name for s in STORES],
                       help="only this store (default: every store)")
    p.set_defaults(run=_run_cache)


def _run_cache(args: argparse.Namespace) -> int:
    from ..errors import ArgumentError

    stores = [s for s in STORES if args.store is None or s.name == args.store] if \
        args.cache_action else []
    if args.cache_action == "list":
        reports = {s.name: s.entries() for s in stores}
        if args.json:
            sys.stdout.write(dumps(reports))
        else:
            for store in stores:
                print("\n".join(store.show(reports[store.name])))
        return 0
    if args.cache_action != "prune":
        print("modpack cache: error: name an action: list or prune", file=sys.stderr)
        return 2
    try:
        size = None
        if args.max_size is not None:
            from ..runtime.kernel_cache import parse_size

            size = parse_size(args.max_size)
        request = PruneRequest(args.all, size, list(args.references))
        chosen = [s for s in stores if s.takes(request)]
        if not chosen:
            raise ArgumentError(f"the {args.store} store takes no "
                                f"{'--max-size' if size is not None else 'REFERENCE'}")
        for store in chosen:
            print(store.prune(request))
    except ArgumentError as exc:
        print(f"modpack cache: error: {exc}", file=sys.stderr)
        return 2
    return 0


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"
