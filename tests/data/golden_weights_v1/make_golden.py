"""Create a golden weight file: a tiny weight file written by the current modpack, and a
description of what it holds.

Run only when deliberately creating a golden file for a new weight file format version; never
regenerate v1. A golden file records what files written by an older modpack contain, and
tests/test_weight_files.py checks that the writer still writes exactly these bytes and that
they hold what expected.json says; regenerating it with a changed writer would hide exactly the
change that test exists to catch.

    python tests/data/golden_weights_v1/make_golden.py tests/data/golden_weights_vN   # new folder

It writes, into that folder:

- ``weights.mpw``: three arrays, ``w`` (int32, 2 x 2), ``b`` (float32, 2) and ``w2`` (a copy of
  ``w``, so its record shares ``w``'s data), alignment 64: the file of docs/format.md's
  example, byte for byte;
- ``expected.json``: the format version, the alignment, every array's name, dtype, shape and
  values, and the file's content digest.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

import modpack
from modpack.weights import write_weight_file
from modpack.weights.format import FORMAT_MAJOR, FORMAT_MINOR

ALIGNMENT = 64


def arrays() -> list[tuple[str, np.ndarray]]:
    """The arrays, in record order: values that survive JSON exactly."""
    w = np.array([[1, 2], [3, 4]], dtype=np.int32)
    return [("w", w), ("b", np.array([0.5, -1.25], dtype=np.float32)), ("w2", w.copy())]


def dump_json(expected: dict) -> str:
    """JSON with one line per field and per array."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in expected.items() if k != "arrays"]
    rows = ",\n".join(f"    {json.dumps(a)}" for a in expected["arrays"])
    lines.append(f'  "arrays": [\n{rows}\n  ]')
    return "{\n" + ",\n".join(lines) + "\n}\n"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    names = ("weights.mpw", "expected.json")
    if any((out / n).exists() for n in names):
        print(f"{out} already holds a golden file; golden files are never regenerated",
              file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    items = arrays()
    written = write_weight_file(items, out / "weights.mpw", ALIGNMENT)
    expected = {
        "format_version": [FORMAT_MAJOR, FORMAT_MINOR],
        "modpack_version": modpack.__version__,
        "alignment": ALIGNMENT,
        "content_digest": written.digest_hex,
        "arrays": [{"name": name, "dtype": a.dtype.str, "shape": list(a.shape),
                    "values": a.tolist()} for name, a in items],
    }
    (out / "expected.json").write_text(dump_json(expected))
    print(f"wrote {', '.join(names)} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
