"""``modpack sign`` and ``modpack verify``: adding Ed25519 signatures to a library, and checking
a library (seal, payloads, signatures) without loading it.

    modpack sign deploy.so --key key.pem            # openssl genpkey -algorithm ed25519
    modpack verify deploy.so --key key.pub.pem      # openssl pkey -in key.pem -pubout
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..reports import VerifyReport
from ..tools.json_schema import dumps

__all__ = ["add_sign", "add_verify", "format_verification"]


def add_sign(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "sign",
        help="add an Ed25519 signature to a library or weight file",
        description=(
            "Add a signature by KEY (an Ed25519 private key in PEM, as `openssl genpkey "
            "-algorithm ed25519` writes it): over the SHA-256 of every byte of a sealed "
            "library, or over a weight file's content digest (after checking every array "
            "against its digest). A file may carry several signatures; signing again with the "
            "same key replaces its signature. load_module(path, trusted_keys=[...]) and "
            "load_weights(path, trusted_keys=[...]) then refuse the file unless one of the "
            "trusted keys signed exactly this content."
        ),
    )
    p.add_argument("library", help="the library (e.g. deploy.so) or weight file to sign; "
                   "replaced atomically (through a symbolic link: the file it names)")
    p.add_argument("--key", action="append", default=[], metavar="KEY.pem",
                   help="an Ed25519 private key (PEM); may be given several times")
    p.add_argument("--oms", metavar="KEY.pem",
                   help="also (or instead) write an OpenSSF model-signing bundle, LIBRARY.sig, "
                        "over the library and its weight files, with this EC private key "
                        "(P-256/384/521): `model_signing verify key` checks it, and "
                        "load_module(..., trusted_oms=PUB.pem) before loading")
    p.add_argument("--weights", action="append", metavar="FILE",
                   help="with --oms: the weight files to cover (default: those the library "
                        "refers to, beside it)")
    p.set_defaults(run=_run_sign)


def _run_sign(args: argparse.Namespace) -> int:
    from ..format.signatures import sign_library

    if not args.key and not args.oms:
        print("modpack sign: error: give --key (an in-file Ed25519 signature) or --oms (an "
              "OpenSSF model-signing bundle), or both", file=sys.stderr)
        return 2
    for key in args.key:
        key_id = sign_library(args.library, key)
        print(f"signed {args.library} with key {key_id[:16]}")
    if args.oms:
        from ..oci.oms import sign_library_oms

        bundle = sign_library_oms(args.library, args.oms, weights=args.weights)
        print(f"wrote the OMS bundle {bundle} (verify: model_signing verify key "
              f"{bundle.parent} --signature {bundle} --public_key PUB.pem)")
    return 0


def add_verify(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "verify",
        help="check a library's or weight file's seal, payloads and signatures (without "
             "loading it)",
        description=(
            "Check everything about a library or weight file that can be checked without "
            "running it: its seal, every payload's checksum and, with --key, that a signature by "
            "one of the keys holds. The seal and checksums detect damage, not tampering: anyone "
            "who edits the file can recompute them, so only --key tells an altered file from a "
            "good one (without it the report says 'NOT authenticated'). Each failure is printed "
            "with what it covers. The exit status is 0 only when every check made holds."
        ),
    )
    p.add_argument("library", help="the library (e.g. deploy.so) or weight file to check")
    p.add_argument("--key", action="append", default=[], metavar="PUB.pem",
                   help="a trusted Ed25519 public key (PEM); may be given several times")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.set_defaults(run=_run_verify)


def _run_verify(args: argparse.Namespace) -> int:
    from ..tools.verification import verify_library

    report = verify_library(args.library, args.key or None)
    if args.json:
        sys.stdout.write(dumps(report))
    else:
        sys.stdout.write(format_verification(report))
    return 0 if report["ok"] else 1


def format_verification(report: VerifyReport) -> str:
    """One line per check: what it is, whether it holds, what it covers, why it failed."""
    out = [report["path"]]
    for c in report["checks"]:
        state = {True: "ok", False: "FAILED", None: "not checked"}[c["ok"]]
        who = f" by key {c['key_id'][:16]}" if c.get("key_id") else ""
        out.append(f"  {c['check']}{who}: {state} (covers {c['covers']})")
        if c["message"] and (c["ok"] is not True or c["check"] == "blob"):
            out.append(f"    {c['message']}")
    not_made = sum(c["ok"] is None for c in report["checks"])
    unsigned = any(c["check"] == "signature" and c["ok"] is None for c in report["checks"])
    if not report["ok"]:
        out.append("NOT verified")
    elif unsigned:
        out.append("intact, NOT authenticated: every check made holds, but without --key "
                   "nothing tells a tampered file from a good one")
    elif not_made:
        out.append(f"verified: every check made holds ({not_made} could not be made, above)")
    else:
        out.append("verified")
    return "\n".join(out) + "\n"
