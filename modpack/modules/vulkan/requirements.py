"""What a shader needs of a Vulkan device, recorded when a module is made so that the runtime
checks it without reading SPIR-V: the shader's SPIR-V version, the least Vulkan API version it
needs, and its capabilities (``OpCapability``).

Each capability must be one the runtime knows (``mp_vulkan_capability_info``: the feature or
subgroup operations it needs, and the Vulkan version that has it), and each extension
(``OpExtension``) one that some Vulkan version has in core (the table below, from the Vulkan
specification's "SPIR-V Environment" appendix): the runtime enables features, never device
extensions, so a shader that needs one is refused here, where it is made, rather than failing on
a device later.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...errors import ArgumentError
from ...runtime.binding import ffi, lib
from .spirv_binary import SpirvFacts

__all__ = ["Requirements", "capability", "requirements"]

# SPIR-V extensions core in a Vulkan version (minor of 1.x): a shader declaring one runs on a
# device of that version without a device extension.
SPIRV_EXTENSIONS = {
    "SPV_KHR_storage_buffer_storage_class": 1, "SPV_KHR_16bit_storage": 1,
    "SPV_KHR_variable_pointers": 1, "SPV_KHR_shader_draw_parameters": 1,
    "SPV_KHR_device_group": 1, "SPV_KHR_multiview": 1,
    "SPV_KHR_8bit_storage": 2, "SPV_KHR_vulkan_memory_model": 2, "SPV_KHR_float_controls": 2,
    "SPV_EXT_descriptor_indexing": 2, "SPV_EXT_shader_viewport_index_layer": 2,
    "SPV_KHR_non_semantic_info": 3, "SPV_KHR_integer_dot_product": 3,
    "SPV_KHR_terminate_invocation": 3, "SPV_KHR_subgroup_uniform_control_flow": 3,
    "SPV_EXT_demote_to_helper_invocation": 3,
}
# Capabilities every Vulkan device has (Shader, Matrix): a shader of SPIR-V 1.0 declaring only
# these needs nothing of a device.
_BASELINE = {0, 1}


@dataclass(frozen=True)
class Requirements:
    spirv_version: int  # the SPIR-V header's version word
    vulkan_minor: int  # Vulkan 1.m
    capabilities: tuple[int, ...]
    names: tuple[str, ...]  # the capabilities' names, for messages

    @property
    def vulkan_version(self) -> int:
        """VK_MAKE_API_VERSION(0, 1, m, 0)."""
        return 1 << 22 | self.vulkan_minor << 12

    @property
    def trivial(self) -> bool:
        """Nothing a Vulkan 1.0 device lacks (payload version 1 can carry the shader)."""
        return self.vulkan_minor == 0 and set(self.capabilities) <= _BASELINE

    def encode(self) -> bytes:
        return struct.pack(f"<3I{len(self.capabilities)}I", self.spirv_version,
                           self.vulkan_version, len(self.capabilities), *self.capabilities)


def capability(number: int) -> tuple[str, str, int] | None:
    """Capability |number| as the runtime knows it: (name, what it needs of a device, Vulkan
    minor version), or None where the runtime does not check and enable it."""
    out = ffi.new("mp_vulkan_capability_t*")
    if lib.mp_vulkan_capability_info(number, out) != lib.MP_OK:
        lib.mp_error_clear()
        return None
    minor = out.vulkan_version >> 12 & 0x3FF
    return ffi.string(out.name).decode(), ffi.string(out.requirement).decode(), minor


def _spirv_minor_to_vulkan(minor: int) -> int:
    """The Vulkan minor version a SPIR-V 1.|minor| module needs."""
    return 0 if minor == 0 else 1 if minor <= 3 else 2 if minor <= 5 else 3


def requirements(spirv: bytes, facts: SpirvFacts, what: str) -> Requirements:
    """What |spirv| needs of a device; ArgumentError for a capability or extension modpack's
    runtime cannot enable, naming it."""
    if len(facts.capabilities) > lib.MP_VULKAN_MAX_CAPABILITIES:
        raise ArgumentError(f"{what}: {len(facts.capabilities)} capabilities (at most "
                            f"{lib.MP_VULKAN_MAX_CAPABILITIES})")
    minor = _spirv_minor_to_vulkan(facts.version[1])
    names = []
    for number in facts.capabilities:
        known = capability(number)
        if known is None:
            name = _capability_names(spirv).get(number, f"number {number}")
            raise ArgumentError(
                f"{what}: it declares the SPIR-V capability {name}, which modpack's Vulkan "
                "runtime does not check and enable (it enables the features of core Vulkan "
                "1.0 to 1.3 that compute shaders use, not device extensions); compile the "
                "shader without what needs it")
        names.append(known[0])
        minor = max(minor, known[2])
    for extension in facts.extensions:
        if extension not in SPIRV_EXTENSIONS:
            raise ArgumentError(
                f"{what}: it declares the SPIR-V extension {extension}, which no core Vulkan "
                "version has: it needs a Vulkan device extension, and modpack's runtime "
                "enables none; compile the shader without what needs it")
        minor = max(minor, SPIRV_EXTENSIONS[extension])
    return Requirements(facts.version_word, minor, tuple(facts.capabilities), tuple(names))


def _capability_names(spirv: bytes) -> dict[int, str]:
    """The names spirv-dis gives |spirv|'s capabilities, by number (for a message only: empty
    without spirv-tools)."""
    tool = shutil.which("spirv-dis")
    if tool is None:
        return {}
    with tempfile.TemporaryDirectory(prefix="modpack-spirv-") as work:
        path = Path(work) / "shader.spv"
        path.write_bytes(spirv)
        proc = subprocess.run([tool, str(path)], capture_output=True, text=True)
    names = re.findall(r"^\s*OpCapability (\w+)", proc.stdout, re.M)
    count = len(spirv) // 4
    words = struct.unpack(f"<{count}I", spirv[:count * 4])
    numbers = []
    at = 5
    while at < count and words[at] >> 16:
        if words[at] & 0xFFFF == 17 and words[at] >> 16 >= 2:  # OpCapability
            numbers.append(words[at + 1])
        at += words[at] >> 16
    return dict(zip(numbers, names)) if len(numbers) == len(names) else {}
