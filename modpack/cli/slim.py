"""``modpack slim FILE -o OUT --keep sm_90,gfx942``: the library cut down to the device code a
fleet needs (modpack.tools.slim.slim_library)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

__all__ = ["add_slim"]


def add_slim(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "slim",
        help="write a copy holding only the device code the given devices need",
        description=(
            "Write a new sealed library holding, of each CUDA and ROCm module, only the code "
            "the kept devices' loaders would choose and the portable code they fall back on "
            "(PTX, generic ROCm targets) — what `modpack preflight` reports. Host code, "
            "weights, OpenCL and Vulkan code are copied byte for byte. The same input and "
            "--keep give the same bytes. A .tar export gives a .tar (its host objects as they "
            "are, its blob object rewritten, the tar seal anew). A signature on the input is "
            "dropped (sign again). "
            "Exit status 0 on success, 1 when a module would keep no code for a kept device, "
            "2 for a bad argument."
        ),
    )
    p.add_argument("library", help="the library (e.g. deploy.so, or a .tar export)")
    p.add_argument("-o", "--output", required=True, help="the slimmed library to write")
    p.add_argument("--keep", required=True,
                   help="comma-separated devices: sm_XY (CUDA), gfxNNN[:feature±] (ROCm), or "
                        "cuda:/rocm: device strings as preflight takes them")
    p.set_defaults(run=_run_slim)


def _run_slim(args: argparse.Namespace) -> int:
    from ..errors import ArgumentError, ModpackError
    from ..tools.slim import slim_library

    try:
        report = slim_library(args.library, args.output, args.keep)
    except ArgumentError as exc:
        print(f"modpack slim: error: {exc}", file=sys.stderr)
        return 2
    except ModpackError as exc:
        print(f"modpack slim: {exc}", file=sys.stderr)
        return 1
    for module in report.modules:
        print(f"module[{module['index']}] ({module['type_key']}): kept "
              f"{', '.join(module['kept']) or '-'}; dropped {', '.join(module['dropped']) or '-'}")
    print(f"{report.output}: {report.output_size} bytes (from {report.input_size})")
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    return 0
