"""Weights at scale: making the files (not timed) and timing exports (row 10).

Modes (the JSON argument's ``mode``):
  prepare  in the folder ``dir``: an Ed25519 key pair (key.pem, key.pub.pem); ``inside.so``, the
           host plus a const module holding the payload ``w`` (``size`` bytes, seed 1), signed;
           ``ext.so`` + ``a.mpw``, the same tree exported with ``weights=a.mpw``, the library
           signed; ``b.mpw``, the same array with other values (seed 2); signed copies of
           both (``a-signed.mpw``, ``b-signed.mpw``); ``small.so`` +
           ``s1.mpw`` (two float64 arrays of 65536 ones) and ``s2.mpw`` (twos), unsigned.
           Reports the paths, sizes and a few sample values of w in each version.
  export   create the payload here, build the tree, then time one of (``kind``):
           ``const``: export_library(out) with the const module inside;
           ``weights``: export_library(out, weights=weights_out);
           ``save``: save_weights({"w": payload}, weights_out) alone.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import _common as c
import numpy as np
import weights_common as wc
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)

import modpack
from modpack.format.signatures import sign_library


def write_key(folder: Path, name: str) -> tuple[Path, Path]:
    """(private PEM, public PEM) of a new Ed25519 key (as tests/test_signing.py:write_key)."""
    key = Ed25519PrivateKey.generate()
    private, public = folder / f"{name}.pem", folder / f"{name}.pub.pem"
    private.write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    public.write_bytes(key.public_key().public_bytes(Encoding.PEM,
                                                     PublicFormat.SubjectPublicKeyInfo))
    return private, public


def big_tree(weights: np.ndarray) -> modpack.BinaryModule:
    host = modpack.csource_module(wc.BIG_HOST_C)
    host.import_module(modpack.const_module({"w": weights}))
    return host


def samples(weights: np.ndarray) -> dict[str, float]:
    return {str(i): float(weights[i]) for i in wc.sample_indices(weights.size)}


def prepare(a: dict) -> dict:
    folder = Path(a["dir"])
    folder.mkdir(parents=True, exist_ok=True)
    private, public = write_key(folder, "key")
    size = a["size"]
    w_a = wc.payload(size, 1)
    inside = big_tree(w_a).export_library(folder / "inside.so")
    sign_library(inside, private)
    ext, wa = folder / "ext.so", folder / "a.mpw"
    big_tree(w_a).export_library(ext, weights=wa)
    sign_library(ext, private)
    samples_a = samples(w_a)
    del w_a
    w_b = wc.payload(size, 2)
    wb = modpack.save_weights({"w": w_b}, folder / "b.mpw")
    samples_b = samples(w_b)
    del w_b

    # Signed copies, for swaps in a signed tree (which take only signed weight files).
    signed_a, signed_b = folder / "a-signed.mpw", folder / "b-signed.mpw"
    for source, copy in ((wa, signed_a), (wb, signed_b)):
        shutil.copyfile(source, copy)
        sign_library(copy, private)

    s1, s2 = folder / "s1.mpw", folder / "s2.mpw"
    for k, path in ((1, s1), (2, s2)):
        modpack.save_weights({"w1": np.full(wc.SMALL_N, float(k)),
                              "w2": np.full(wc.SMALL_N, float(k))}, path)
    small = modpack.csource_module(wc.SMALL_HOST_C)
    small.import_module(modpack.weights_module(s1))
    small.export_library(folder / "small.so")

    files = {"inside": inside, "ext": ext, "a": wa, "b": wb, "a_signed": signed_a,
             "b_signed": signed_b, "small": folder / "small.so",
             "s1": s1, "s2": s2}
    return {"key": str(private), "pub": str(public), "size": size,
            "files": {k: str(Path(p).resolve()) for k, p in files.items()},
            "file_sizes": {k: os.path.getsize(p) for k, p in files.items()},
            "samples": {"a": samples_a, "b": samples_b}}


def export(a: dict) -> dict:
    weights = wc.payload(a["size"], 1)
    host = big_tree(weights)
    kind = a["kind"]
    t0 = c.now()
    if kind == "const":
        host.export_library(a["out"])
    elif kind == "weights":
        host.export_library(a["out"], weights=a["weights_out"])
    else:
        modpack.save_weights({"w": weights}, a["weights_out"])
    seconds = c.now() - t0
    written = {"const": [a.get("out")], "weights": [a.get("out"), a.get("weights_out")],
               "save": [a.get("weights_out")]}[kind]
    return {"kind": kind, "export_s": seconds,
            "bytes_written": sum(os.path.getsize(p) for p in written if os.path.exists(p))}


if __name__ == "__main__":
    args = c.args()
    c.emit({"prepare": prepare, "export": export}[args["mode"]](args))
