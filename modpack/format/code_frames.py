"""Code frames, writer and tool side: device code stored compressed in a payload.

An export with ``compress_code`` stores each piece of a device module's code (a CUDA variant,
the OpenCL source and binaries, a SPIR-V shader, a ROCm code object) as a *code frame*
(csrc/include/modpack/format.h; docs/format.md, "Code frames"): a 64-byte header and the
code, compressed with Zstandard when that makes it smaller. Encoding and decoding are the C
runtime's (``mp_code_frame_encode``/``_decode``, libzstd loaded on first use), so the one
definition of the encoding is the reader's, and a loading-only install needs no Python
compression package. Weights are never framed: they stay in place, zero-copy and aligned.
"""

from __future__ import annotations

from typing import Any

import xxhash

from ..errors import ArgumentError
from ..runtime.binding import check, ffi, lib

__all__ = [
    "DEFAULT_LEVEL",
    "ENCODINGS",
    "FRAME_HEADER_SIZE",
    "CodeFrames",
    "compress_level",
    "decode_frame",
    "frame_info",
]

FRAME_HEADER_SIZE: int = lib.MP_CODE_FRAME_HEADER_SIZE
ENCODINGS = {lib.MP_CODE_STORED: "stored", lib.MP_CODE_ZSTD: "zstd"}
# compress_code=True: zstd level 19. Code is written once and read many times; decoding speed
# hardly depends on the level, and 19 gives most of what the slowest levels give on PTX and
# cubins (benchmarks/thin_packages.py) at a few MB/s per core.
DEFAULT_LEVEL = 19


def compress_level(compress_code: bool | int) -> int:
    """The zstd level ``compress_code`` asks for: 0 (no frames) for False, DEFAULT_LEVEL for
    True, else the level itself (1 to 22)."""
    if compress_code is True:
        return DEFAULT_LEVEL
    if compress_code is False or compress_code is None:
        return 0
    if isinstance(compress_code, int) and 1 <= compress_code <= 22:
        return compress_code
    raise ArgumentError(f"compress_code must be True, False or a zstd level from 1 to 22, not "
                        f"{compress_code!r}")


class CodeFrames:
    """Encodes pieces of device code as code frames at one level; each distinct piece is
    encoded once however often a payload is asked for (its size, then its bytes)."""

    def __init__(self, level: int) -> None:
        self.level = level
        self._done: dict[tuple[int, int], bytes] = {}

    def __call__(self, code: Any) -> bytes:
        data = bytes(memoryview(code).cast("B"))
        key = (len(data), xxhash.xxh3_64_intdigest(data))
        frame = self._done.get(key)
        if frame is None:
            frame = self._done[key] = _encode(data, self.level)
        return frame


def _encode(data: bytes, level: int) -> bytes:
    capacity = lib.mp_code_frame_bound(len(data))
    if capacity == 0:  # libzstd is missing: the encoder says so
        capacity = len(data) + FRAME_HEADER_SIZE
    buffer = ffi.new("uint8_t[]", max(capacity, 1))
    size = ffi.new("uint64_t*")
    check(lib.mp_code_frame_encode(data, len(data), level, buffer, capacity, size))
    return bytes(ffi.buffer(buffer, size[0]))


def frame_info(frame: Any) -> tuple[str, int]:
    """A frame's encoding (``"stored"``, ``"zstd"``) and the size of the code it holds, its
    header checked as a load checks it (``FormatError`` when damaged)."""
    view = memoryview(frame).cast("B")
    encoding, raw_size = ffi.new("uint32_t*"), ffi.new("uint64_t*")
    check(lib.mp_code_frame_info(ffi.from_buffer(view), len(view), encoding, raw_size))
    return ENCODINGS[encoding[0]], raw_size[0]


def decode_frame(frame: Any) -> bytes:
    """The code a frame holds, decoded and checked as a load decodes it (``FormatError`` for a
    damaged frame, ``UnavailableError`` without libzstd)."""
    view = memoryview(frame).cast("B")
    _, raw_size = frame_info(view)
    buffer = ffi.new("uint8_t[]", max(raw_size, 1))
    check(lib.mp_code_frame_decode(ffi.from_buffer(view), len(view), buffer, raw_size))
    return bytes(ffi.buffer(buffer, raw_size))
