"""Write the seed corpus of fuzz_dltensor.c into a folder: well-formed calls of the target's
signatures (compact, strided with negative strides, empty, a copy between two arrays) and each
overflow case of the security audit, in the input format fuzz_dltensor.c documents.

    python csrc/tests/make_dltensor_corpus.py CORPUS_DIR
"""

from __future__ import annotations

import struct
import sys
from pathlib import Path

# The target's lists, by index (fuzz_dltensor.c: `signatures`, `dtypes`).
SIGNATURE = {
    "x: float32[n] cpu": 0,
    "x: float32[n] cpu, out: float32[n] cpu": 1,
    "m: float64[rows, cols] strided, column": 2,
    "rgb: uint8[*, 3], scalar: float32[], anything: any[...]": 3,
    "a: float32[n, k], b: float32[k, m], c: float32[n, m]": 4,
    "x: any[...] strided": 5,
    "x: any": 6,
    "x: int8[...] strided cpu opencl cuda": 7,
    "w: float4_e2m1fn_x2[n, k] cpu, x: float8_e4m3fn[n] strided": 10,
    "p: float4_e2m1fn[*, *] strided, q: float6_e3m2fn[...]": 11,
}
DTYPE = {"float32": 0, "float64": 1, "uint8": 2, "int8": 3, "int64": 4, "complex64": 5,
         "bfloat16": 6, "float32x4": 7, "bool": 8, "float4_e2m1fn": 12, "float4_e2m1fn_x2": 13,
         "float6_e2m3fn": 14, "float8_e4m3fn": 15, "float4_e2m1fnx3": 16}
FLOAT6_E3M2FN = (16, 6, 1)
DEVICE = {"cpu": 0, "opencl": 1, "cuda": 2}
REAL, ADDRESS, NULL = 0, 2, 3


def value(v: int) -> bytes:
    """Any 64-bit value, written out (the tag >= 128 form)."""
    return b"\x80" + struct.pack("<Q", v % (1 << 64))


def array(shape: list[int], dtype: str | tuple[int, int, int] = "float32", *,
          strides: list[int] | None = None, byte_offset: int = 0, device: str = "cpu",
          data: int | None = None, null: bool = False) -> bytes:
    out = bytes([0, len(shape)])  # kind 0: an array; ndim
    if isinstance(dtype, tuple):
        code, bits, lanes = dtype
        out += bytes([255, code, bits]) + struct.pack("<H", lanes)
    else:
        out += bytes([DTYPE[dtype]])
    out += bytes([DEVICE[device]])
    placement = NULL if null else REAL if data is None else ADDRESS
    out += bytes([(1 if strides is not None else 0) | placement << 2])
    out += value(byte_offset)
    out += b"".join(value(e) for e in shape)
    out += b"".join(value(s) for s in strides or [])
    if placement == ADDRESS:
        out += value(data)
    return out


def integer(v: int) -> bytes:
    return b"\x06" + value(v)


def call(signature: str, *arguments: bytes) -> bytes:
    if signature in SIGNATURE:
        head = bytes([SIGNATURE[signature]])
    else:
        text = signature.encode()
        head = bytes([255, len(text)]) + text
    return head + b"".join(arguments)


SEEDS = {
    # Well-formed calls: accepted, read whole under ASan.
    "affine": call("x: float32[n] cpu, out: float32[n] cpu", array([8]), array([8])),
    "affine-empty": call("x: float32[n] cpu, out: float32[n] cpu", array([0]), array([0])),
    "column-negative-strides": call("m: float64[rows, cols] strided, column",
                                    array([3, 4], "float64", strides=[-4, 1]), integer(1)),
    "column-transposed": call("m: float64[rows, cols] strided, column",
                              array([4, 3], "float64", strides=[1, 4], byte_offset=8),
                              integer(0)),
    "shapes": call("rgb: uint8[*, 3], scalar: float32[], anything: any[...]",
                   array([5, 3], "uint8"), array([]), array([2, 2, 2], "int64")),
    "matmul": call("a: float32[n, k], b: float32[k, m], c: float32[n, m]",
                   array([2, 3]), array([3, 4]), array([2, 4])),
    "vectors": call("x: any[...] strided", array([4], "float32x4")),
    "empty-rows": call("x: any[...] strided", array([0, 3], strides=[3, 1])),
    "device": call("x: int8[...] strided cpu opencl cuda",
                   array([16], "int8", device="opencl", data=0x5555_0000_0000)),
    "text-signature": call("x: complex64[2, *] strided cpu", array([2, 5], "complex64")),
    # The audit's cases: each refused before host code could run.
    "shape-2^32x2^32": call("x: any[...] strided", array([1 << 32, 1 << 32])),
    "shape-bytes-2^64": call("x: float32[n] cpu", array([1 << 62])),
    "shape-bytes-2^63": call("x: float32[n] cpu", array([1 << 61])),
    "negative-extent": call("x: any[...] strided", array([4, -1])),
    "empty-but-huge": call("x: any[...] strided", array([0, 1 << 62])),
    "byte-offset-2^63": call("x: float32[n] cpu", array([4], byte_offset=1 << 63)),
    "offset-plus-bytes": call("x: any[...] strided", array([1 << 40], "uint8",
                                                           byte_offset=(1 << 63) - (1 << 39))),
    "data-plus-offset-wraps": call("x: any[...] strided",
                                   array([1], "uint8", byte_offset=0x1000,
                                         data=0xFFFF_FFFF_FFFF_F800)),
    "data-wraps": call("x: float32[n] cpu", array([2048], data=0xFFFF_FFFF_FFFF_F000)),
    "strides-overflow": call("x: any[...] strided", array([4], strides=[1 << 62])),
    "strides-min": call("x: any[...] strided", array([2, 2], strides=[-(1 << 63), 1])),
    "strides-below-zero": call("x: any[...] strided",
                               array([8192], strides=[-1], data=0x1000)),
    "strides-wrap-high": call("x: any[...] strided",
                              array([8], "int8", strides=[1 << 45], data=0xFFFF_8000_0000_0000)),
    "rank-33": call("x: any[...] strided", array([1] * 33)),
    "no-element-size": call("x: any[...] strided", array([4], (2, 0, 1))),
    "no-shape": call("x: any", bytes([0, 2, 0, 0, 2]) + value(0)),
    "null-data": call("x: float32[n] cpu", array([4], null=True)),
    # A copy between the first two arrays (mp_array_copy).
    "copy": call("x: float32[n] cpu, out: float32[n] cpu", array([16]), array([16])),
    # DLPack 1.1's sub-byte formats: packed pairs and fp8, accepted and read whole.
    "fp4-pairs-fp8": call("w: float4_e2m1fn_x2[n, k] cpu, x: float8_e4m3fn[n] strided",
                          array([3, 5], "float4_e2m1fn_x2"), array([3], "float8_e4m3fn")),
    # Packed 4- and 6-bit values: odd extents (the last byte half used), values that straddle
    # bytes, negative strides that start mid-byte, a copy of a packed array.
    "fp4-packed-odd": call("p: float4_e2m1fn[*, *] strided, q: float6_e3m2fn[...]",
                           array([3, 5], "float4_e2m1fn"), array([7], FLOAT6_E3M2FN)),
    "fp4-packed-negative-strides": call("p: float4_e2m1fn[*, *] strided, q: float6_e3m2fn[...]",
                                        array([3, 5], "float4_e2m1fn", strides=[-5, 1]),
                                        array([1, 5], FLOAT6_E3M2FN)),
    "fp6-packed-strided": call("x: any[...] strided",
                               array([4, 3], "float6_e2m3fn", strides=[1, -7], byte_offset=16)),
    "fp4-copy": call("x: float32[n] cpu, out: float32[n] cpu", array([9], "float4_e2m1fn"),
                     array([9], "float4_e2m1fn")),
    # Sub-byte sizes at the limits: 2^62 packed 4-bit values are 2^61 bytes (accepted as a
    # layout, past any real memory), 2^63 of them more elements than PTRDIFF_MAX.
    "fp4-packed-2^62": call("x: any[...] strided", array([1 << 62], "float4_e2m1fn")),
    "fp4-packed-2^63": call("x: any[...] strided", array([1 << 62, 2], "float4_e2m1fn")),
    "fp4-packed-strides-overflow": call("x: any[...] strided",
                                        array([5], "float4_e2m1fn", strides=[1 << 62])),
    # 4 bits x 3 lanes: neither packed nor whole bytes.
    "fp4-lanes-3": call("x: any[...] strided", array([4], "float4_e2m1fnx3")),
}


def main(folder: str) -> None:
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in SEEDS.items():
        (out / f"dltensor-{name}").write_bytes(data)


if __name__ == "__main__":
    main(sys.argv[1])
