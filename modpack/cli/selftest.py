"""``modpack selftest FILE [--device D]``: run the self-tests a library carries on this machine
and say pass or fail per test (modpack.selftests).

    modpack selftest deploy.so                      # each test on device 0 of its type
    modpack selftest deploy.so --device opencl:1    # that device's tests there, and the CPU's
    modpack selftest oci://registry/model:v3 --device cuda:0   # pulled first (modpack[oci])
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..tools.json_schema import dumps

__all__ = ["add_selftest", "format_selftest"]


def add_selftest(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "selftest",
        help="run the self-tests a library carries and say pass or fail per test",
        description=(
            "Load the library (its seal, checksums and, with --key, a trusted signature "
            "checked first, as any load), run each self-test it was exported with "
            "(export_library(..., selftests=[...])): its inputs copied to a device of its "
            "type, the function called, its outputs compared with the expected ones within "
            "the test's tolerances. --device runs the tests of that device's type there (and "
            "the CPU's tests), skipping the others. Exit status 0 when every test run passed "
            "and at least one ran, 1 when one failed or could not run (or none ran), 2 for a "
            "DEVICE that names no device."
        ),
    )
    p.add_argument("library", help="the library (e.g. deploy.so, deploy.tar), or an "
                   "oci://HOST/REPO:TAG reference, pulled for this machine's devices into the "
                   "local store first, as load_module pulls it (needs modpack[oci])")
    p.add_argument("--device", help="cpu, opencl:N, cuda:N, rocm:N, vulkan:N (a type alone: "
                   "device 0); default: each test on device 0 of its own type")
    p.add_argument("--key", action="append", default=[], metavar="PUB.pem",
                   help="load only if a signature by this Ed25519 public key (PEM) holds; may "
                        "be given several times")
    p.add_argument("--oms-key", action="append", default=[], metavar="PUB.pem",
                   help="verify the library's OMS bundle with this EC public key first (as "
                        "modpack pull --oms-key); may be given several times")
    p.add_argument("--json", action="store_true", help="print the results as JSON on stdout")
    p.set_defaults(run=_run_selftest)


def _run_selftest(args: argparse.Namespace) -> int:
    from ..errors import ArgumentError
    from ..runtime.array import parse_device
    from ..selftests import selftest

    if args.device is not None:
        try:
            parse_device(args.device)
        except ArgumentError as exc:
            print(f"modpack selftest: error: {exc}", file=sys.stderr)
            return 2
    results = selftest(args.library, args.device, trusted_keys=args.key or None,
                       trusted_oms=args.oms_key or None)
    ran = [r for r in results if r.status != "skipped"]
    passed = bool(ran) and all(r.passed for r in ran)
    if args.json:
        report = {"path": args.library, "device": args.device, "passed": passed,
                  "tests": [r.to_json() for r in results]}
        sys.stdout.write(dumps(report))
    else:
        sys.stdout.write(format_selftest(args.library, results))
    return 0 if passed else 1


def format_selftest(library: str, results: list[Any]) -> str:
    """One line per test (its status, where it ran, its largest errors, why it failed), then
    the counts."""
    out = []
    for r in results:
        line = f"{r.status.upper():<7} {r.name} ({r.function} on {r.device})"
        if r.max_abs_error is not None:
            line += f"  max abs error {r.max_abs_error:.3g}, max rel error {r.max_rel_error:.3g}"
        if r.status in ("pass", "fail"):
            line += f"  {r.seconds * 1e3:.1f} ms"
        out.append(line)
        if r.message:
            out.append(f"        {r.message}")
    counts = {s: sum(r.status == s for r in results) for s in ("pass", "fail", "error", "skipped")}
    ran = counts["pass"] + counts["fail"] + counts["error"]
    verdict = ("PASSED" if ran and counts["pass"] == ran
               else "NOTHING RAN" if not ran else "FAILED")
    out.append(f"{library}: {verdict}: {counts['pass']} passed, {counts['fail']} failed, "
               f"{counts['error']} could not run, {counts['skipped']} skipped")
    return "\n".join(out) + "\n"
