"""``modpack push`` and ``modpack pull``: shipping libraries through OCI registries
(modpack.oci). The store pulls fill is listed and pruned by ``modpack cache`` (cli/cache.py,
its ``layers`` store).

    modpack push deploy.so oci://ghcr.io/team/model:v1 [--weights W] [--variants sm_80,sm_90]
    modpack pull oci://ghcr.io/team/model:v1 [--device cuda:sm_90] [-o DIR] [--oms-key PUB.pem]
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from ..tools.json_schema import dumps

__all__ = ["add_pull", "add_push"]


def _registry_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--plain-http", action="store_true",
                   help="speak plain HTTP to the registry, not HTTPS (MODPACK_OCI_PLAIN_HTTP)")
    p.add_argument("--ca", metavar="CA.pem",
                   help="trust this CA bundle for the registry's TLS (MODPACK_OCI_CA)")
    p.add_argument("--docker-config", metavar="config.json",
                   help="Docker's config.json with the registry's credentials (default: "
                        "$DOCKER_CONFIG/config.json, else ~/.docker/config.json)")


def _settings(args: argparse.Namespace) -> Any:
    from ..oci import RegistrySettings

    return RegistrySettings(plain_http=True if args.plain_http else None, ca_file=args.ca,
                            docker_config=args.docker_config)


def _log_lines() -> None:
    """INFO lines of modpack.oci on stderr when stderr is no terminal (a bar is drawn
    there otherwise)."""
    if sys.stderr.isatty():
        return
    logger = logging.getLogger("modpack.oci")
    if not any(isinstance(h, logging.StreamHandler) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)


def add_push(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "push",
        help="push a library and its weight files to an OCI registry",
        description=(
            "Push LIBRARY and its weight files (those it refers to, found beside it, or "
            "--weights) to REFERENCE (oci://HOST/REPO:TAG) as an OCI artifact: one layer per "
            "file, raw, so the registry stores a weight file once across tags, variants and "
            "models; a config with what `modpack inspect --json` says; ModelPack's artifact "
            "type and annotations. --variants pushes an image index with one manifest per "
            "device, each a slim of the library. --oms KEY signs each manifest's files "
            "(OpenSSF model signing) and pushes the bundle as a referrer; without it, a "
            "bundle beside the library (LIBRARY.sig) goes along. The tag is written last."),
    )
    p.add_argument("library", help="the library (e.g. deploy.so)")
    p.add_argument("reference", help="where to: oci://HOST/REPO:TAG")
    p.add_argument("--weights", action="append", metavar="FILE",
                   help="a weight file to push with it (may repeat; default: the files the "
                        "library refers to, beside it)")
    p.add_argument("--variants", metavar="DEVICES",
                   help="comma-separated devices (sm_80,sm_90,gfx942): one slimmed manifest "
                        "each, in an image index")
    p.add_argument("--oms", metavar="KEY.pem",
                   help="sign each manifest's files with this EC private key (OMS)")
    _registry_flags(p)
    p.set_defaults(run=_run_push)


def _run_push(args: argparse.Namespace) -> int:
    from ..oci import push

    _log_lines()
    result = push(args.library, args.reference, weights=args.weights, variants=args.variants,
                  oms_key=args.oms, settings=_settings(args))
    for device, digest in result.manifests.items():
        print(f"manifest {digest} ({device})")
    print(f"pushed {result.reference}@{result.digest}: {result.uploaded_bytes} bytes uploaded, "
          f"{result.skipped_layers} layers the registry had"
          + (f", {result.bundles} OMS bundles" if result.bundles else ""))
    return 0


def add_pull(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "pull",
        help="pull a library from an OCI registry into the local store (and a folder)",
        description=(
            "Pull REFERENCE into the local store ($MODPACK_CACHE): the manifest this "
            "machine's devices need (or --device's), then only the layers the store lacks, "
            "each checked against its digest as it streams in and published only whole; an "
            "interrupted pull resumes. -o DIR gives the files their names in DIR. "
            "--oms-key verifies the OpenSSF model-signing bundle that refers to the manifest."),
    )
    p.add_argument("reference", help="oci://HOST/REPO:TAG[@sha256:...]")
    p.add_argument("--device", default="host",
                   help="host (this machine's devices: default), cuda:sm_XY, rocm:TARGET_ID")
    p.add_argument("-o", "--output", metavar="DIR", help="also place the files in DIR")
    p.add_argument("--oms-key", action="append", metavar="PUB.pem",
                   help="require an OMS bundle by this EC public key (may repeat)")
    p.add_argument("--json", action="store_true", help="print what was pulled as JSON")
    _registry_flags(p)
    p.set_defaults(run=_run_pull)


def _run_pull(args: argparse.Namespace) -> int:
    from ..oci import pull

    _log_lines()
    pulled = pull(args.reference, device=args.device, output=args.output,
                  trusted_oms=args.oms_key, settings=_settings(args))
    answer = {"reference": pulled.reference, "manifest": pulled.manifest,
              "device": pulled.device, "library": str(pulled.library),
              "weights": {k: str(v) for k, v in pulled.weights.items()},
              "bundle": str(pulled.bundle) if pulled.bundle else None,
              "downloaded": pulled.downloaded, "oms_verified": pulled.verified_oms}
    if args.json:
        sys.stdout.write(dumps(answer))
        return 0
    print(f"pulled {pulled.reference} (manifest {pulled.manifest}, "
          f"{'device ' + pulled.device if pulled.device else 'every device'}): "
          f"{pulled.downloaded} bytes downloaded"
          + (", OMS signature verified" if pulled.verified_oms else ""))
    print(f"  library {pulled.library}")
    for name, path in pulled.weights.items():
        print(f"  weights {name}: {path}")
    if pulled.bundle:
        print(f"  OMS bundle {pulled.bundle}")
    return 0
