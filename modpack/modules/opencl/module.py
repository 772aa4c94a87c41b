"""The ``opencl`` kind: OpenCL C source, the build options it is built with, and a
function-info record per kernel.

Stored as source (portable; programs are built lazily per device at the first call, and
PoCL/driver caches make rebuilds cheap), optionally with prebuilt program binaries keyed by
``"platform/device/driver"`` that the runtime uses when they match the device. Read by the C
runtime's ``loadbinary_opencl`` (csrc/src/kinds/opencl/); the payload's layout and numbers are
in csrc/include/modpack/kinds/opencl.h, read here through the runtime binding.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import ArgumentError
from ...format.layout import check_struct
from ...runtime.binding import lib
from ..device import CodeWriter, DeviceModule, code_as_is
from ..kernel_info import KernelInfo, kernel_infos, launch_tags
from .build_check import check_build
from .signatures import parse_kernel_signatures

__all__ = ["LAUNCH_TAGS", "OpenCLModule", "opencl_module"]

LAUNCH_TAGS = launch_tags("opencl")  # global x, y, z, local x, y, z
_HEADER = check_struct(struct.Struct("<IIQ"), "mp_opencl_header_v1_t")


def check_build_options(build_options: str | None) -> str:
    """|build_options| as stored: a str of at most MP_OPENCL_MAX_BUILD_OPTIONS bytes."""
    if build_options is None:
        return ""
    if not isinstance(build_options, str):
        raise ArgumentError(
            f"build_options must be a str such as '-DT=float -cl-mad-enable', not "
            f"{type(build_options).__name__}"
        )
    size = len(build_options.encode())
    if size > lib.MP_OPENCL_MAX_BUILD_OPTIONS or "\0" in build_options:
        raise ArgumentError(f"build_options of {size} bytes: at most "
                            f"{lib.MP_OPENCL_MAX_BUILD_OPTIONS}, with no NUL character")
    return build_options


def _check_binaries(binaries: Mapping[str, bytes] | None) -> dict[str, bytes]:
    """|binaries| as stored: program binaries (bytes) by "platform/device/driver" key."""
    if binaries is None:
        return {}
    if not isinstance(binaries, Mapping):
        raise ArgumentError("binaries must map 'platform/device/driver' keys to program "
                            f"binaries (modpack.opencl_binaries makes them), not "
                            f"{type(binaries).__name__}")
    out = {}
    for key, data in binaries.items():
        if not isinstance(key, str) or not isinstance(data, (bytes, bytearray, memoryview)):
            raise ArgumentError(f"binaries[{key!r}]: a program binary is bytes under a "
                                f"'platform/device/driver' str key, not {type(data).__name__}")
        out[key] = bytes(data)
    return out


class OpenCLModule(DeviceModule):
    """OpenCL kernels carried in the library and run through the runtime's OpenCL device."""

    type_key = "opencl"
    kind_launch_tags = LAUNCH_TAGS

    def __init__(self, source: str, functions: Mapping[str, Any] | Iterable[KernelInfo] | None,
                 binaries: Mapping[str, bytes] | None = None,
                 build_options: str | None = None, name: str | None = None,
                 build_check: bool = False) -> None:
        super().__init__(name)
        if not isinstance(source, str):
            raise ArgumentError("opencl_module expects OpenCL C source as a str")
        if not isinstance(build_check, bool):
            raise ArgumentError(f"build_check must be True or False, not {build_check!r}")
        self.source = source
        self.build_options = check_build_options(build_options)
        self.build_check = build_check
        if functions is None:
            self.functions = parse_kernel_signatures(source, self.build_options, LAUNCH_TAGS)
            if not self.functions:
                raise ArgumentError("no __kernel functions found in the OpenCL source (after "
                                    f"preprocessing with build options {self.build_options!r})")
        else:
            self.functions = kernel_infos(functions, LAUNCH_TAGS)
        self.check_records()
        self.binaries = _check_binaries(binaries)

    def check_before_export(self) -> None:
        """With ``build_check``: the source built here, on every OpenCL device, before the
        export does any work (:mod:`.build_check`)."""
        if self.build_check:
            what = "opencl module" + (f" {self.name!r}" if self.name else "")
            # stacklevel: check_build's caller is this, then the export's steps, then the user
            check_build(self.source, self.build_options, what, stacklevel=6)

    def payload_chunks(self, code: CodeWriter = code_as_is) -> list[bytes]:
        source = bytes(code(self.source.encode()))
        # Version 1 when nothing needs version 2, so that older runtimes read it.
        options = self.build_options.encode()
        version = 2 if options else self.payload_version(lib.MP_OPENCL_PAYLOAD_VERSION)
        parts = [_HEADER.pack(version, 0, len(source)), source]
        if version >= 2:
            parts += [struct.pack("<I", len(options)), options, self.encode_name()]
        parts.append(self.encode_records(version))
        parts.append(struct.pack("<I", len(self.binaries)))
        for key, data in self.binaries.items():
            k = key.encode()
            stored = bytes(code(data))
            parts += [struct.pack("<I", len(k)), k, struct.pack("<Q", len(stored)), stored]
        return [b"".join(parts)]


def opencl_module(source: str, functions: Mapping[str, Any] | Iterable[KernelInfo] | None = None,
                  binaries: Mapping[str, bytes] | None = None,
                  build_options: str | None = None, *, name: str | None = None,
                  build_check: bool = False) -> OpenCLModule:
    """An OpenCL module. Each kernel is called with its arguments followed by six integers:
    global x, y, z and local x, y, z (local 0 lets the runtime choose).

    functions : per-kernel argument specs (``{"vadd": ["float32*", "float32*", "int32"]}``);
        when omitted, read from the source as the OpenCL compiler sees it with
        |build_options| (preprocessed: macros and ``#if`` resolved, typedefs followed;
        ``void*``/``char*`` buffers take arrays of any dtype, a ``float4*`` buffer an array of
        float32, a ``__local`` pointer ``modpack.local_memory(nbytes)``).
    binaries : prebuilt program binaries keyed by ``"platform/device/driver"``
        (see ``modpack.device_name``), built with the same |build_options|
        (``modpack.opencl_binaries``); used when they match the device, else the source.
    build_options : OpenCL build options (``"-DT=float -cl-std=CL3.0 -cl-mad-enable"``), stored
        with the source and used for every build of it.
    name : the module's name; its kernels are then also found as ``"name/kernel"``, so that
        two modules defining the same kernel names (one source built with two sets of build
        options, say) can share a library.
    build_check : build the source, with |build_options|, on this machine's OpenCL devices at
        ``export_library``, before any other work, through the runtime (the build the first
        launch does): a source that does not build then fails the export with
        ``CompileError`` and the device's build log, instead of failing at its first launch
        where the library runs. Without an OpenCL device here it warns that nothing was
        checked. Off by default: the exporting machine's driver is not the deployment's (a
        build may fail or pass here and not there), exports would succeed or fail by which
        drivers are installed where they run, and builds take time at every export.
    """
    return OpenCLModule(source, functions, binaries, build_options, name, build_check)
