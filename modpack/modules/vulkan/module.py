"""The ``vulkan`` kind: SPIR-V compute shaders and, per kernel, a function-info record and its
interface, all read from the SPIR-V by reflection (:mod:`.spirv`): the storage buffers in
binding order, then the push-constant block's members as scalars, and the workgroup size.

Read by the C runtime's ``loadbinary_vulkan`` (csrc/src/kinds/vulkan/); the payload's layout and
numbers are in csrc/include/modpack/kinds/vulkan.h, read here through the runtime binding.
"""

from __future__ import annotations

import dataclasses
import os
import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from ...errors import ArgumentError
from ...format.layout import check_struct
from ...runtime.binding import lib
from ..device import CodeWriter, DeviceModule, code_as_is
from ..kernel_info import KernelArg, KernelInfo, launch_tags
from .glsl import Defines, GlslOptions, compile_glsl
from .requirements import requirements
from .specialization import (
    Specialization,
    Specialized,
    encode_constants,
    specialise,
    split_specialization,
)
from .spirv import EntryPoint, is_spirv, reflect
from .spirv_binary import SpirvFacts, read_facts

__all__ = ["LAUNCH_TAGS", "VulkanKernel", "VulkanModule", "vulkan_module"]

LAUNCH_TAGS = launch_tags("vulkan")  # workgroups x, y, z
_HEADER = check_struct(struct.Struct("<III"), "mp_vulkan_header_v1_t")
_ALIGNMENT: int = lib.MP_VULKAN_SHADER_ALIGNMENT
_RECORD_VERSION = 2  # the symbol field carries the entry point


@dataclass(frozen=True)
class VulkanKernel:
    """A kernel: its record (buffers, then scalars), its shader and entry point's interface,
    the workgroup size its pipeline runs with and the specialization constants it gets."""

    info: KernelInfo
    shader: int
    entry: EntryPoint
    workgroup_size: tuple[int, int, int] = (1, 1, 1)
    constants: tuple[Specialized, ...] = ()

    def encode_interface(self, version: int) -> bytes:
        e = self.entry
        parts = [struct.pack("<5I", self.shader, *self.workgroup_size, e.push_constant_size)]
        parts += [struct.pack("<II", b.set, b.binding) for b in e.buffers]
        parts += [struct.pack("<II", s.offset, 0) for s in e.scalars]
        if version >= 2:
            parts.append(encode_constants(self.constants))
        return b"".join(parts)


def _kernel(name: str, shader: int, entry: EntryPoint, what: str) -> VulkanKernel:
    limit = lib.MP_VULKAN_MAX_PUSH_CONSTANTS
    if entry.push_constant_size > limit:
        raise ArgumentError(f"{what}: a push-constant block of {entry.push_constant_size} bytes "
                            f"(at most {limit})")
    for b in entry.buffers:
        if b.set >= lib.MP_VULKAN_MAX_SETS or b.binding >= lib.MP_VULKAN_MAX_BINDING:
            raise ArgumentError(f"{what}: buffer {b.name} at set {b.set} binding {b.binding} "
                                f"(sets below {lib.MP_VULKAN_MAX_SETS}, bindings below "
                                f"{lib.MP_VULKAN_MAX_BINDING})")
    args = [KernelArg.parse("void*" if b.dtype is None else f"{b.dtype}*") for b in entry.buffers]
    args += [KernelArg.parse(s.dtype) for s in entry.scalars]
    return VulkanKernel(KernelInfo(name, tuple(args), LAUNCH_TAGS, symbol=entry.name), shader,
                        entry)


class VulkanModule(DeviceModule):
    """Vulkan compute kernels carried in the library as SPIR-V and run through the runtime's
    Vulkan device."""

    type_key = "vulkan"
    kind_launch_tags = LAUNCH_TAGS

    def __init__(self, shaders: list[bytes], kernels: list[VulkanKernel],
                 name: str | None = None) -> None:
        super().__init__(name)
        if not shaders:
            raise ArgumentError("a vulkan module needs at least one shader")
        if len(shaders) > lib.MP_VULKAN_MAX_SHADERS:
            raise ArgumentError(f"{len(shaders)} shaders (at most {lib.MP_VULKAN_MAX_SHADERS})")
        self.shaders = [bytes(s) for s in shaders]
        self.requirements = [requirements(s, read_facts(s, f"vulkan shader {i}"),
                                          f"vulkan shader {i}")
                             for i, s in enumerate(self.shaders)]
        self.kernels = list(kernels)
        self.functions = [k.info for k in self.kernels]
        names = [f.name for f in self.functions]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ArgumentError(f"kernels {twice} are defined twice; name them with a dict "
                                "{name: shader}")
        self.check_records()

    @property
    def vulkan_payload_version(self) -> int:
        """1 when no kernel has specialization constants and no shader needs more than every
        Vulkan 1.0 device has (older runtimes then read the module), else 2."""
        simple = all(r.trivial for r in self.requirements)
        return 2 if any(k.constants for k in self.kernels) or not simple else 1

    def payload_chunks(self, code: CodeWriter = code_as_is) -> list[bytes]:
        version = self.vulkan_payload_version
        shaders = [bytes(code(s)) for s in self.shaders]
        parts = [_HEADER.pack(version, 0, len(shaders)), self.encode_name()]
        parts += [struct.pack("<Q", len(s)) for s in shaders]
        if version >= 2:
            parts += [r.encode() for r in self.requirements]
        parts.append(struct.pack("<I", len(self.kernels)))
        parts += [k.info.encode(_RECORD_VERSION) for k in self.kernels]
        parts += [k.encode_interface(version) for k in self.kernels]
        size = sum(len(p) for p in parts)
        for shader in shaders:
            padding = -size % _ALIGNMENT
            parts += [bytes(padding), shader]
            size += padding + len(shader)
        return [b"".join(parts)]


# A shader: SPIR-V bytes, GLSL source (a str), a file of either, or GLSL with its own defines.
# typing.Union, not |: a type alias is evaluated at import, and CPython 3.9 has no | on types.
ShaderSource = Union[str, bytes, bytearray, memoryview, os.PathLike[str]]
Shader = Union[ShaderSource, tuple[ShaderSource, Defines]]


def _spirv(shader: Shader, glsl: GlslOptions, what: str) -> bytes:
    """|shader| as SPIR-V: bytes as they are, GLSL compiled with |glsl| (and the variant's own
    defines when |shader| is a (source, defines) pair), a file read first."""
    defines: Defines | None = None
    if isinstance(shader, tuple):
        if len(shader) != 2:
            raise ArgumentError(f"{what}: a shader variant is a pair (GLSL source or file, "
                                f"defines), not a tuple of {len(shader)}")
        shader, defines = shader
    path: Path | None = None
    if isinstance(shader, os.PathLike):
        path = Path(shader)
        try:
            raw = path.read_bytes()
        except OSError as exc:
            raise ArgumentError(f"{what}: cannot read shader file {path}: {exc.strerror}"
                                ) from None
        if not is_spirv(raw):
            try:
                shader = raw.decode()
            except UnicodeDecodeError:
                raise ArgumentError(f"{what}: {path} is neither SPIR-V nor GLSL text (UTF-8)"
                                    ) from None
        else:
            shader = raw
    if isinstance(shader, str):
        return compile_glsl(shader, what, glsl.with_defines(defines, what), path)
    if isinstance(shader, (bytes, bytearray, memoryview)):
        data = bytes(shader)
        if not is_spirv(data) or len(data) % 4 or len(data) < 20:
            raise ArgumentError(f"{what}: bytes that are not SPIR-V (no magic number 0x07230203, "
                                "or not whole 32-bit words); pass GLSL compute source as a str")
        if defines is not None:
            raise ArgumentError(f"{what}: defines are for GLSL source; this shader is SPIR-V")
        return data
    raise ArgumentError(f"{what}: a shader is SPIR-V bytes, GLSL compute source (a str), a file "
                        f"of either (a Path), or a pair (GLSL, defines), not "
                        f"{type(shader).__name__}")


def vulkan_module(shaders: Shader | Mapping[str, Shader], name: str | None = None, *,
                  specialization: Specialization | None = None, defines: Defines | None = None,
                  include_dirs: Iterable[str | os.PathLike[str]] | None = None,
                  target_env: str | None = None, options: Sequence[str] | None = None
                  ) -> VulkanModule:
    """A Vulkan module of SPIR-V compute shaders, each given as SPIR-V bytes or as GLSL compute
    source (compiled here by ``glslangValidator -V``).

    shaders : ``{kernel name: shader}`` — each shader's compute entry point (the one named like
        the kernel when it has several) becomes that kernel — or one shader, whose every compute
        entry point becomes a kernel named like it (``"main"`` for GLSL), in name order. A shader
        is SPIR-V (bytes), GLSL source (a str), a file holding either (a ``Path``; a GLSL file's
        folder is searched first for its includes), or a pair ``(GLSL, defines)``: a variant
        with its own macros on top of |defines|. One file compiled into several variants is one
        module: ``{"matmul_f32": src, "matmul_f16": (src, {"FLOAT16": 1})}``.

    name : the module's name; its kernels are then also found as ``"name/kernel"``.

    defines : macros for every GLSL shader (``-D``): ``{"BLOCK": 64, "FAST": None}`` (None:
        defined, empty; a bool: 1 or 0) or ``["BLOCK=64", "FAST"]``.

    include_dirs : folders searched for ``#include`` (``-I``), in order. ``#include`` works
        without the source asking for GL_GOOGLE_include_directive, as it does with glslc.

    target_env : glslang's target environment (``--target-env``), e.g. ``"vulkan1.2"`` (SPIR-V
        1.5); the default is Vulkan 1.0 (SPIR-V 1.0).

    options : further glslangValidator flags, e.g. ``["-g"]`` (not those modpack sets itself).

    specialization : values of the shaders' specialization constants
        (``layout(constant_id = N) const ...`` and ``layout(local_size_x_id = N) in;``), set when
        each kernel's pipeline is made: ``{"BLOCK_SIZE": 256}`` (by the constant's name) or
        ``{0: 256}`` (by its SpecId) for every kernel whose shader has that constant,
        ``{"softmax": {...}}`` for one kernel (which wins over the former). Each value is typed by
        its constant's SPIR-V type (bool, int, uint or float of its width) and refused if it does
        not fit. A kernel whose workgroup size comes from a constant given no value is refused
        here, naming the constant: the shader's default (often 1) would run it with too few
        invocations per workgroup and a wrong result. Any other constant given no value keeps the
        default its shader declares; ``modpack inspect`` shows every kernel's constants and which
        are defaults.

    Each kernel's record comes from the SPIR-V by reflection: its storage buffers in (set,
    binding) order, then its push-constant block's members as scalars, in offset order. A kernel
    is called with those arguments followed by three workgroup counts (x, y, z).

    Examples
    --------
    >>> softmax = modpack.vulkan_module({"softmax": SOFTMAX_GLSL},
    ...                                 specialization={"softmax": {0: 256}})  # doctest: +SKIP
    """
    glsl = GlslOptions.make(defines, include_dirs, target_env, options, "vulkan_module")
    shader_list: list[bytes] = []
    found: list[tuple[str, int, EntryPoint, str]] = []  # kernel, shader, entry point, what
    if isinstance(shaders, Mapping):
        if not shaders:
            raise ArgumentError("vulkan_module: no shaders given")
        for kernel, shader in shaders.items():
            if not isinstance(kernel, str):
                raise ArgumentError(f"vulkan_module: kernel names are str, not {kernel!r}")
            what = f"vulkan shader {kernel!r}"
            spirv = _spirv(shader, glsl, what)
            entries = reflect(spirv, what)
            if len(entries) > 1:
                named = [e for e in entries if e.name == kernel]
                if not named:
                    raise ArgumentError(
                        f"{what}: {len(entries)} compute entry points "
                        f"({', '.join(e.name for e in entries)}) and none is called {kernel!r}")
                entries = named
            found.append((kernel, len(shader_list), entries[0], what))
            shader_list.append(spirv)
    else:
        spirv = _spirv(shaders, glsl, "vulkan shader")
        found = [(e.name, 0, e, f"vulkan shader, entry point {e.name}")
                 for e in reflect(spirv, "vulkan shader")]
        shader_list.append(spirv)
    facts: list[SpirvFacts] = [read_facts(s, f"vulkan shader {i}")
                               for i, s in enumerate(shader_list)]
    common, per_kernel = split_specialization(specialization, [f[0] for f in found])
    used: set[str | int] = set()
    kernels = []
    for kernel, index, entry, what in found:
        spirv_facts = facts[index]
        constants, size = specialise(kernel, spirv_facts.constants,
                                     spirv_facts.workgroups[entry.name], common,
                                     per_kernel.get(kernel, {}), used)
        base = _kernel(kernel, index, entry, what)
        kernels.append(dataclasses.replace(base, workgroup_size=size, constants=constants))
    unused = [key for key in common if key not in used]
    if unused:
        every = sorted({c.label for f in facts for c in f.constants})
        raise ArgumentError(f"vulkan_module: specialization constant {unused[0]!r} is in no "
                            f"kernel's shader (theirs: {', '.join(every) or 'none'})")
    return VulkanModule(shader_list, kernels, name)
