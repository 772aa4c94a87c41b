"""What modpack reads from a SPIR-V module's words itself: the facts ``spirv-cross --reflect``
does not report, or reports wrong, and on which a kernel's correctness depends.

- its SPIR-V version, capabilities (``OpCapability``) and extensions (``OpExtension``): what a
  Vulkan device must offer and enable to run it (:mod:`.requirements`);
- its specialization constants: each one's SpecId, name (``OpName``), type and default value;
- each compute entry point's workgroup size, dimension by dimension a literal or a
  specialization constant. The ``WorkgroupSize`` built-in decides when the module has one, then
  the entry point's ``LocalSizeId`` execution mode, then its ``LocalSize``. Reflection reads a
  dimension taken from a specialization constant as the constant's SpecId (``local_size_x_id =
  0`` shows as a workgroup size of 0), which is how a kernel once ran with the wrong size.

The layout read is the SPIR-V specification's (section 2.3, "Physical Layout"): a five-word
header, then instructions whose first word holds their word count (high 16 bits) and opcode.
Only module-level instructions are interpreted; every instruction's length is checked.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Union

from ...errors import ArgumentError

__all__ = ["SpecConstant", "SpirvFacts", "read_facts"]

# Opcodes and operands (SPIR-V specification, section 3).
_OP_NAME, _OP_EXTENSION, _OP_ENTRY_POINT, _OP_EXECUTION_MODE, _OP_CAPABILITY = 5, 10, 15, 16, 17
_OP_TYPE_BOOL, _OP_TYPE_INT, _OP_TYPE_FLOAT = 20, 21, 22
_OP_CONSTANT_TRUE, _OP_CONSTANT_FALSE, _OP_CONSTANT, _OP_CONSTANT_COMPOSITE = 41, 42, 43, 44
_OP_SPEC_TRUE, _OP_SPEC_FALSE, _OP_SPEC_CONSTANT, _OP_SPEC_COMPOSITE = 48, 49, 50, 51
_OP_DECORATE, _OP_EXECUTION_MODE_ID = 71, 331
_DECORATION_SPEC_ID, _DECORATION_BUILT_IN, _BUILT_IN_WORKGROUP_SIZE = 1, 11, 25
_MODEL_GL_COMPUTE, _MODE_LOCAL_SIZE, _MODE_LOCAL_SIZE_ID = 5, 17, 38


@dataclass(frozen=True)
class SpecConstant:
    """A specialization constant: its SpecId, its name in the source (None when the compiler
    gave it none, as glslang does for ``local_size_x_id``), its type (``"bool"``, ``"int"``,
    ``"uint"`` or ``"float"`` of |bits| bits; a bool is a 32-bit VkBool32 to Vulkan) and its
    default value."""

    id: int
    name: str | None
    type: str
    bits: int
    default: bool | int | float

    @property
    def label(self) -> str:
        """How messages name it: ``BLOCK_SIZE (SpecId 0)`` or ``SpecId 0``."""
        return f"{self.name} (SpecId {self.id})" if self.name else f"SpecId {self.id}"

    @property
    def type_name(self) -> str:
        return "bool" if self.type == "bool" else f"{self.type}{self.bits}"


# One dimension of a workgroup size: a literal, or a specialization constant.
# typing.Union, not |: a type alias is evaluated at import, and CPython 3.9 has no | on types.
Dimension = Union[int, SpecConstant]


@dataclass(frozen=True)
class SpirvFacts:
    version: tuple[int, int]  # (major, minor)
    capabilities: tuple[int, ...]  # SPIR-V capability numbers, in the module's order
    extensions: tuple[str, ...]
    constants: tuple[SpecConstant, ...]  # in SpecId order
    workgroups: dict[str, tuple[Dimension, Dimension, Dimension]]  # per compute entry point

    @property
    def version_word(self) -> int:
        """The version as the SPIR-V header holds it (0x00010500 for 1.5)."""
        return self.version[0] << 16 | self.version[1] << 8


def _string(words: tuple[int, ...], what: str) -> tuple[str, int]:
    """The NUL-terminated UTF-8 literal at the start of |words|, and how many words it takes."""
    raw = struct.pack(f"<{len(words)}I", *words)
    end = raw.find(b"\0")
    if end < 0:
        raise ArgumentError(f"{what}: the SPIR-V has a string literal without its NUL")
    try:
        return raw[:end].decode(), end // 4 + 1
    except UnicodeDecodeError:
        raise ArgumentError(f"{what}: the SPIR-V has a string literal that is not UTF-8") from None


def _instructions(spirv: bytes, what: str) -> list[tuple[int, tuple[int, ...]]]:
    count = len(spirv) // 4
    words = struct.unpack(f"<{count}I", spirv[:count * 4])
    out = []
    at = 5
    while at < count:
        length, opcode = words[at] >> 16, words[at] & 0xFFFF
        if length == 0 or length > count - at:
            raise ArgumentError(f"{what}: the SPIR-V is damaged (an instruction at word {at} "
                                f"claims {length} words, {count - at} are left)")
        out.append((opcode, words[at + 1:at + length]))
        at += length
    return out


def read_facts(spirv: bytes, what: str) -> SpirvFacts:
    """The facts of |spirv| (a whole module, magic number checked by the caller); |what| names
    it in messages."""
    if len(spirv) < 20 or len(spirv) % 4:
        raise ArgumentError(f"{what}: SPIR-V is whole 32-bit words, at least its 5-word header")
    version_word = struct.unpack_from("<I", spirv, 4)[0]
    version = (version_word >> 16 & 0xFF, version_word >> 8 & 0xFF)
    if version[0] != 1 or version_word & 0xFF0000FF:
        raise ArgumentError(f"{what}: the SPIR-V header's version word 0x{version_word:08x} is "
                            "not a SPIR-V 1.x version")
    capabilities: list[int] = []
    extensions: list[str] = []
    names: dict[int, str] = {}
    spec_ids: dict[int, int] = {}
    workgroup_builtin: int | None = None
    types: dict[int, tuple[str, int]] = {}  # result id -> ("bool"|"int"|"uint"|"float", bits)
    literals: dict[int, int | bool] = {}  # ids of non-specialization scalar constants
    specs: dict[int, tuple[int, tuple[str, int], tuple[int, ...]]] = {}  # id -> (op, type, words)
    composites: dict[int, tuple[int, ...]] = {}
    entries: dict[int, str] = {}
    local_size: dict[int, tuple[int, ...]] = {}
    local_size_id: dict[int, tuple[int, ...]] = {}
    for opcode, ops in _instructions(spirv, what):
        if opcode == _OP_CAPABILITY and ops:
            capabilities.append(ops[0])
        elif opcode == _OP_EXTENSION:
            extensions.append(_string(ops, what)[0])
        elif opcode == _OP_NAME and len(ops) >= 2:
            name = _string(ops[1:], what)[0]
            if name:
                names[ops[0]] = name
        elif opcode == _OP_ENTRY_POINT and len(ops) >= 3 and ops[0] == _MODEL_GL_COMPUTE:
            entries[ops[1]] = _string(ops[2:], what)[0]
        elif opcode == _OP_EXECUTION_MODE and len(ops) >= 5 and ops[1] == _MODE_LOCAL_SIZE:
            local_size[ops[0]] = ops[2:5]
        elif opcode == _OP_EXECUTION_MODE_ID and len(ops) >= 5 and ops[1] == _MODE_LOCAL_SIZE_ID:
            local_size_id[ops[0]] = ops[2:5]
        elif opcode == _OP_DECORATE and len(ops) >= 3:
            if ops[1] == _DECORATION_SPEC_ID:
                spec_ids[ops[0]] = ops[2]
            elif ops[1] == _DECORATION_BUILT_IN and ops[2] == _BUILT_IN_WORKGROUP_SIZE:
                workgroup_builtin = ops[0]
        elif opcode == _OP_TYPE_BOOL and ops:
            types[ops[0]] = ("bool", 32)
        elif opcode == _OP_TYPE_INT and len(ops) >= 3:
            types[ops[0]] = ("int" if ops[2] else "uint", ops[1])
        elif opcode == _OP_TYPE_FLOAT and len(ops) >= 2:
            types[ops[0]] = ("float", ops[1])
        elif opcode in (_OP_CONSTANT_TRUE, _OP_CONSTANT_FALSE) and len(ops) >= 2:
            literals[ops[1]] = opcode == _OP_CONSTANT_TRUE
        elif opcode == _OP_CONSTANT and len(ops) >= 3 and types.get(ops[0], ("",))[0] in (
                "int", "uint"):
            literals[ops[1]] = int(_decode(types[ops[0]], ops[2:]))
        elif opcode in (_OP_SPEC_TRUE, _OP_SPEC_FALSE, _OP_SPEC_CONSTANT) and len(ops) >= 2:
            if ops[0] in types:
                specs[ops[1]] = (opcode, types[ops[0]], ops[2:])
        elif opcode in (_OP_CONSTANT_COMPOSITE, _OP_SPEC_COMPOSITE) and len(ops) >= 2:
            composites[ops[1]] = ops[2:]
    constants: dict[int, SpecConstant] = {}  # by result id
    unique: dict[int, SpecConstant] = {}  # by SpecId
    for result, (opcode, (kind, bits), value_words) in specs.items():
        if result not in spec_ids:
            continue  # not specializable: its default is final
        if opcode == _OP_SPEC_CONSTANT:
            if bits not in (8, 16, 32, 64) or len(value_words) < (2 if bits == 64 else 1):
                raise ArgumentError(f"{what}: specialization constant SpecId {spec_ids[result]} "
                                    f"is a {bits}-bit {kind}, which Vulkan cannot specialise")
            default: bool | int | float = _decode((kind, bits), value_words)
        else:
            default = opcode == _OP_SPEC_TRUE
        constant = SpecConstant(spec_ids[result], names.get(result), kind, bits, default)
        # Several ids may carry one SpecId (glslang declares local_size_x_id's twice when it
        # targets SPIR-V 1.6): they are specialised together, so they must agree.
        same = unique.setdefault(constant.id, constant)
        if (same.type, same.bits) != (kind, bits):
            raise ArgumentError(f"{what}: SpecId {constant.id} is both a {same.type_name} and a "
                                f"{constant.type_name} specialization constant")
        if same.name is None and constant.name is not None:
            unique[constant.id] = same = constant
        constants[result] = same
    by_id = [unique[i] for i in sorted(unique)]
    constants = {r: unique[c.id] for r, c in constants.items()}

    def dimension(ref: int) -> Dimension:
        if ref in constants:
            return constants[ref]
        if ref in literals and not isinstance(literals[ref], bool):
            return int(literals[ref])
        if ref in specs:  # a specialization constant without a SpecId: its default
            kind_bits, value_words = specs[ref][1], specs[ref][2]
            return int(_decode(kind_bits, value_words))
        raise ArgumentError(f"{what}: a workgroup size refers to id {ref}, which is no integer "
                            "constant")

    workgroups: dict[str, tuple[Dimension, Dimension, Dimension]] = {}
    for entry, name in entries.items():
        if workgroup_builtin is not None and len(composites.get(workgroup_builtin, ())) == 3:
            x, y, z = (dimension(r) for r in composites[workgroup_builtin])
        elif entry in local_size_id:
            x, y, z = (dimension(r) for r in local_size_id[entry])
        elif entry in local_size:
            x, y, z = local_size[entry]
        else:
            raise ArgumentError(f"{what}: compute entry point {name} has no workgroup size "
                                "(`layout(local_size_x = ...) in;`)")
        workgroups[name] = (x, y, z)
    return SpirvFacts(version, tuple(capabilities), tuple(extensions), tuple(by_id), workgroups)


def _decode(kind_bits: tuple[str, int], words: tuple[int, ...]) -> int | float:
    """A scalar constant's value from its literal words (low-order word first)."""
    kind, bits = kind_bits
    raw = words[0] | (words[1] << 32 if bits == 64 and len(words) > 1 else 0)
    raw &= (1 << bits) - 1
    if kind == "float":
        code = {16: "<e", 32: "<f", 64: "<d"}.get(bits)
        if code is None:
            return raw
        return float(struct.unpack(code, raw.to_bytes(bits // 8, "little"))[0])
    if kind == "int" and raw >> (bits - 1):
        return raw - (1 << bits)
    return raw
