"""What the device kinds (``opencl``, ``cuda``) share: kernel records and an optional module
name, written the same way into each payload (the C side is csrc/src/kinds/common/).

A name lets two device modules that define the same kernel names live in one library (one
source built with two sets of options, say): callers reach each as ``"name/kernel"``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from ..errors import ArgumentError
from ..runtime.binding import lib
from .base import BinaryModule
from .kernel_info import KernelInfo

__all__ = ["MAX_MODULE_NAME_BYTES", "CodeWriter", "DeviceModule", "check_compiler_options",
           "check_module_name", "code_as_is"]

MAX_MODULE_NAME_BYTES: int = lib.MP_MODULE_MAX_NAME


def check_module_name(name: str | None) -> str | None:
    """|name| as stored: None, or 1..MAX_MODULE_NAME_BYTES bytes with no '/' or NUL."""
    if name is None:
        return None
    if not isinstance(name, str):
        raise ArgumentError(f"a module name must be a str, not {type(name).__name__}")
    size = len(name.encode())
    if not 0 < size <= MAX_MODULE_NAME_BYTES or "/" in name or "\0" in name:
        raise ArgumentError(f"module name {name!r}: 1 to {MAX_MODULE_NAME_BYTES} bytes without "
                            "'/' (which separates it from a kernel name in lookups) or NUL")
    return name


def check_compiler_options(options: Sequence[str], what: str) -> list[str]:
    """|options| (extra compiler flags) as a list of str, else ArgumentError saying so: they
    reach a compiler's command line, where anything else fails far from the call."""
    if isinstance(options, (str, bytes)) or not isinstance(options, Iterable):
        raise ArgumentError(f"{what}: options must be a list of compiler flags such as "
                            f"['-I/path', '-DN=4'], not {options!r}")
    flags = list(options)
    for flag in flags:
        if not isinstance(flag, str):
            raise ArgumentError(f"{what}: options holds {flag!r}; each compiler flag is a str "
                                "such as '-DN=4'")
    return flags


# How a kind writes one piece of its device code into its payload: as is, or as a code frame
# (modpack/format/code_frames.py) when the export compresses code.
CodeWriter = Callable[[Any], Any]


def code_as_is(code: Any) -> Any:
    return code


class DeviceModule(BinaryModule):
    """A binary kind whose payload carries kernel records (``functions``) and a ``name``, and
    device code that an export may store in code frames: its ``payload_chunks(code=...)``
    passes each piece of code through |code|, and its tables give each piece's size as
    written."""

    functions: list[KernelInfo]
    kind_launch_tags: Sequence[str] = ()  # the runtime's launch tags of this kind
    frames_code = True  # payload_chunks takes code=, and the runtime reads the frames

    def payload_chunks(self, code: CodeWriter = code_as_is) -> Iterable[Any]:
        raise NotImplementedError(f"{type(self).__name__} must implement payload_chunks()")

    def save_to_binary(self) -> bytes:
        return b"".join(bytes(memoryview(c).cast("B")) for c in self.payload_chunks())

    def __init__(self, name: str | None = None) -> None:
        super().__init__()
        self.name = check_module_name(name)

    @property
    def kernel_names(self) -> list[str]:
        return [f.name for f in self.functions]

    def payload_version(self, newest: int) -> int:
        """1 when nothing needs the newer layout (older runtimes then read the module), else
        |newest|."""
        needs_v2 = self.name is not None or any(f.record_version > 1 for f in self.functions)
        return newest if needs_v2 else 1

    def encode_name(self) -> bytes:
        name = (self.name or "").encode()
        return struct.pack("<I", len(name)) + name

    def encode_records(self, payload_version: int) -> bytes:
        """The kernel count and the records, in the layout of |payload_version|."""
        record_version = 2 if payload_version >= 2 else 1
        return struct.pack("<I", len(self.functions)) + b"".join(
            f.encode(record_version) for f in self.functions)

    def check_records(self) -> None:
        """Every record's launch tags are the kind's, each given once."""
        for info in self.functions:
            info.check_tags(self.kind_launch_tags)
