"""Create a golden format file: a small library exported by the current modpack, the raw blob
it embeds, and a description of the tree it must load as.

Run only when deliberately creating a new golden file for a new format version; never
regenerate v1. A golden file records what libraries written by an older modpack contain, and
tests/test_golden.py checks that the reader keeps reading it; regenerating it with a changed
writer would hide exactly the incompatibility that test exists to catch.

    python tests/data/golden_v1/make_golden.py tests/data/golden_vN   # a new, empty folder
    python tests/data/golden_v1/make_golden.py --no-tar tests/data/golden_vN

It writes, into that folder:

- ``deploy.so``: host C code (``add_int``, ``vadd``) importing a diamond of ``const``
  modules: the host imports A and B, and both import one shared module S;
- ``deploy.tar``: the same tree exported as a ``.tar`` (since the seal), unless ``--no-tar``
  (for a new library seal whose ``.tar`` form is unchanged: golden_v2_sealed);
- ``devc.bin``: the blob of that export (the bytes of ``__dev_mblob``, read from the library);
- ``expected.json``: the tree in index order (type keys, ``row_ptr``, ``child_indices``) and
  every array's name, dtype, shape and values.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import modpack
from modpack.exporter.serializer import ModuleSerializer
from modpack.format import ALIGNMENT, FORMAT_MAJOR, FORMAT_MINOR
from modpack.format.image import find_blob

# The host code of tests/conftest.py (VADD_C), frozen here with the golden file.
HOST_C = r"""
#include "modpack/backend.h"
static void vadd(DLTensor* a, DLTensor* b, DLTensor* c) {
  const float* x = a->data; const float* y = b->data; float* z = c->data;
  for (int64_t i = 0; i < a->shape[0]; ++i) z[i] = x[i] + y[i];
}
MP_EXPORT_VOID_FUNC(vadd, DLTensor*, DLTensor*, DLTensor*)
static int64_t add_int(int64_t a, int64_t b) { return a + b; }
MP_EXPORT_FUNC(add_int, int64_t, int64_t, int64_t)
"""

# Small arrays of distinct dtypes whose values survive JSON exactly.
ARRAYS = {
    "A": {
        "a_weight": np.array([[0.5, -1.25, 2.0], [1024.0, -0.0078125, 3.5]], dtype=np.float32),
        "a_bias": np.array([-128, 0, 127], dtype=np.int8),
    },
    "B": {
        "b_ids": np.array([-(2**40) - 7, 0, 2**62 + 3], dtype=np.int64),
        "b_mask": np.array([True, False, True, True], dtype=np.bool_),
    },
    "S": {
        "s_table": np.array([[0.1, -2.5], [1e300, 5e-324]], dtype=np.float64),
        "s_u16": np.array([65535, 1, 256], dtype=np.uint16),
    },
}

# Depth-first index order with the root at 0; S is reached first through A.
EXPECTED_ORDER = ["host", "A", "S", "B"]
EXPECTED_ROW_PTR = [0, 2, 3, 3, 4]
EXPECTED_CHILD_INDICES = [1, 3, 2, 2]


def build() -> tuple[modpack.Module, dict[int, str]]:
    """The diamond tree, and a label for each module (by id)."""
    host = modpack.csource_module(HOST_C)
    mods = {label: modpack.const_module(arrays) for label, arrays in ARRAYS.items()}
    host.import_module(mods["A"])
    host.import_module(mods["B"])
    mods["A"].import_module(mods["S"])
    mods["B"].import_module(mods["S"])
    labels = {id(m): label for label, m in mods.items()}
    return host, labels


def describe(host: modpack.Module, labels: dict[int, str], blob: bytes) -> dict:
    plan = ModuleSerializer(host).plan
    order = ["host" if n is None else labels[id(n)] for n in plan.nodes]
    assert order == EXPECTED_ORDER, order
    assert plan.row_ptr == EXPECTED_ROW_PTR, plan.row_ptr
    assert plan.child_indices == EXPECTED_CHILD_INDICES, plan.child_indices
    modules = []
    for index, (label, key) in enumerate(zip(order, plan.type_keys, strict=True)):
        arrays = [
            {"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "values": a.tolist()}
            for name, a in ARRAYS.get(label, {}).items()
        ]
        modules.append({"index": index, "label": label, "type_key": key, "arrays": arrays})
    return {
        "format_version": [FORMAT_MAJOR, FORMAT_MINOR],
        "modpack_version": modpack.__version__,
        "blob_size": len(blob),
        "modules": modules,
        "row_ptr": plan.row_ptr,
        "child_indices": plan.child_indices,
        "functions": {"add_int": {"args": [40, 2], "result": 42}},
    }


def dump_json(value: object, indent: str = "") -> str:
    """JSON with every value that fits on one line kept on one line."""
    flat = json.dumps(value)
    if len(indent) + len(flat) <= 96 or not isinstance(value, (dict, list)) or not value:
        return flat
    inner = indent + "  "
    if isinstance(value, dict):
        items = [f"{inner}{json.dumps(k)}: {dump_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{indent}}}"
    items = [inner + dump_json(v, inner) for v in value]
    return "[\n" + ",\n".join(items) + f"\n{indent}]"


def main(argv: list[str]) -> int:
    tar = "--no-tar" not in argv[1:]
    args = [a for a in argv[1:] if a != "--no-tar"]
    if len(args) != 1 or args[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(args[0])
    names = ("deploy.so", "deploy.tar", "devc.bin", "expected.json")
    if any((out / n).exists() for n in names):
        print(f"{out} already holds a golden file; golden files are never regenerated",
              file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    host, labels = build()
    library = host.export_library(out / "deploy.so")
    if tar:
        host.export_library(out / "deploy.tar")
    placement = find_blob(library, ALIGNMENT)
    with open(library, "rb") as f:
        f.seek(placement.offset)
        blob = f.read(placement.size)
    (out / "devc.bin").write_bytes(blob)
    expected = describe(host, labels, blob)
    (out / "expected.json").write_text(dump_json(expected) + "\n")
    written = [n for n in names if tar or n != "deploy.tar"]
    print(f"wrote {', '.join(written)} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
