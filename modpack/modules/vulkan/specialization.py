"""Specialization constants of the ``vulkan`` kind: the values ``vulkan_module(...,
specialization=...)`` gives, checked against each kernel's constants (:mod:`.spirv_binary`),
typed by each constant's SPIR-V type, and written into the kernel's interface, where the
runtime reads them into the VkSpecializationInfo of the kernel's pipeline.

A value is given for every kernel of the module (``{"BLOCK_SIZE": 256}``, or by SpecId:
``{0: 256}``) or for one kernel (``{"softmax": {"BLOCK_SIZE": 256}}``), the kernel's own
winning. The rule that keeps a kernel from running with the wrong size: a workgroup dimension
that comes from a specialization constant must be given a value, or the kernel is refused here
(the shader's default, often 1, would run each workgroup with too few invocations and compute a
wrong answer without an error). Every other constant keeps its default when given none, as the
shader's author declared it; ``modpack inspect`` lists each kernel's constants with their
values, marking the defaults.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Union

import numpy as np

from ...errors import ArgumentError
from ...runtime.binding import lib
from .spirv_binary import Dimension, SpecConstant

__all__ = ["MAX_CONSTANTS", "Specialization", "Specialized", "encode_constants", "specialise",
           "split_specialization"]

MAX_CONSTANTS: int = lib.MP_VULKAN_MAX_CONSTANTS
MAX_CONSTANT_NAME: int = lib.MP_VULKAN_MAX_CONSTANT_NAME
_CODES = {"int": lib.kDLInt, "uint": lib.kDLUInt, "float": lib.kDLFloat, "bool": lib.kDLBool}
_FLAG_DEFAULT: int = lib.MP_VULKAN_CONSTANT_DEFAULT

# typing.Union, not |: a type alias is evaluated at import, and CPython 3.9 has no | on types.
Value = Union[bool, int, float]
Specialization = Mapping[Union[str, int], Union[Value, Mapping[Union[str, int], Value]]]


@dataclass(frozen=True)
class Specialized:
    """A constant as a kernel's pipeline gets it: the value given, or its default."""

    constant: SpecConstant
    value: Value
    given: bool


def split_specialization(specialization: Specialization | None, kernels: list[str]
                         ) -> tuple[dict[str | int, Value], dict[str, dict[str | int, Value]]]:
    """|specialization| as (values for every kernel, values per kernel name): a key mapping to
    a mapping names a kernel, any other key a constant (a str its name, an int its SpecId)."""
    if specialization is None:
        return {}, {}
    if not isinstance(specialization, Mapping):
        raise ArgumentError("vulkan_module: specialization maps constants (a name or a SpecId) "
                            "to values, or kernel names to such maps, e.g. {'BLOCK_SIZE': 256} "
                            f"or {{'softmax': {{0: 256}}}}, not {type(specialization).__name__}")
    common: dict[str | int, Value] = {}
    per_kernel: dict[str, dict[str | int, Value]] = {}
    for key, value in specialization.items():
        if isinstance(value, Mapping):
            if key not in kernels:
                raise ArgumentError(f"vulkan_module: specialization names kernel {key!r}, which "
                                    f"the module does not have (its kernels: "
                                    f"{', '.join(kernels)})")
            per_kernel[str(key)] = {_key(k, f"kernel {key}"): v for k, v in value.items()}
        else:
            common[_key(key, "every kernel")] = value
    return common, per_kernel


def _key(key: object, where: str) -> str | int:
    if isinstance(key, bool) or not isinstance(key, (str, int, np.integer)):
        raise ArgumentError(f"vulkan_module: specialization for {where}: {key!r} is no constant; "
                            "name one by its name in the shader (a str) or its SpecId (an int)")
    return key if isinstance(key, str) else int(key)


def _find(constants: tuple[SpecConstant, ...], key: str | int) -> SpecConstant | None:
    for c in constants:
        if (c.name == key) if isinstance(key, str) else (c.id == key):
            return c
    return None


def specialise(kernel: str, constants: tuple[SpecConstant, ...],
               workgroup: tuple[Dimension, Dimension, Dimension],
               common: Mapping[str | int, Value], own: Mapping[str | int, Value],
               used: set[str | int]) -> tuple[tuple[Specialized, ...], tuple[int, int, int]]:
    """Kernel |kernel|'s constants (those of its shader) with their values, and its
    specialised workgroup size. Keys of |common| that name one of its constants are added to
    |used|; every key of |own| must name one. ArgumentError for a value of the wrong type, and
    for a workgroup dimension taken from a constant given no value."""
    what = f"vulkan_module: kernel {kernel}"
    values: dict[int, tuple[Value, str | int]] = {}
    for scope, given in ((None, common), (kernel, own)):
        level: dict[int, str | int] = {}
        for key, value in given.items():
            constant = _find(constants, key)
            if constant is None:
                if scope is None:
                    continue
                raise ArgumentError(f"{what}: specialization constant {key!r} is not one of its "
                                    f"shader's ({_listing(constants)})")
            if scope is None:
                used.add(key)
            if constant.id in level:
                raise ArgumentError(f"{what}: specialization constant {constant.label} is given "
                                    f"twice, as {level[constant.id]!r} and as {key!r}")
            level[constant.id] = key
            values[constant.id] = (_typed(constant, value, what), key)
    if len(constants) > MAX_CONSTANTS:
        raise ArgumentError(f"{what}: {len(constants)} specialization constants (at most "
                            f"{MAX_CONSTANTS})")
    for c in constants:
        if c.name is not None and len(c.name.encode()) > MAX_CONSTANT_NAME:
            raise ArgumentError(f"{what}: specialization constant {c.name[:64]}... has a name of "
                                f"more than {MAX_CONSTANT_NAME} bytes")
    sizes = []
    for axis, dim in zip("xyz", workgroup):
        if isinstance(dim, int):
            sizes.append(dim)
            continue
        if dim.id not in values:
            raise ArgumentError(
                f"{what}: its workgroup size along {axis} is specialization constant "
                f"{dim.label}, and no value is given for it. Its host program chooses it when "
                f"it makes the pipeline; modpack runs no kernel with the shader's placeholder "
                f"({dim.default}), which gives wrong results without an error. Pass "
                f"specialization={{{(dim.name or dim.id)!r}: N}} (or "
                f"{{{kernel!r}: {{{dim.id}: N}}}})")
        value = values[dim.id][0]
        if dim.type not in ("int", "uint") or isinstance(value, bool) or not 1 <= value < 2**32:
            raise ArgumentError(f"{what}: its workgroup size along {axis} is specialization "
                                f"constant {dim.label}, which must be a positive integer, not "
                                f"{value!r}")
        sizes.append(int(value))
    for axis, size in zip("xyz", sizes):
        if not 1 <= size < 2**32:
            raise ArgumentError(f"{what}: a workgroup size of {size} along {axis}")
    out = tuple(Specialized(c, values[c.id][0] if c.id in values else c.default, c.id in values)
                for c in constants)
    return out, (sizes[0], sizes[1], sizes[2])


def _listing(constants: tuple[SpecConstant, ...]) -> str:
    return ", ".join(f"{c.label}: {c.type_name}" for c in constants) or "it has none"


def _typed(constant: SpecConstant, value: object, what: str) -> Value:
    """|value| as |constant|'s type holds it, else ArgumentError naming both."""
    article = "an" if constant.type_name.startswith("int") else "a"
    where = (f"{what}: specialization constant {constant.label} is {article} "
             f"{constant.type_name}, and {value!r} is not one")
    if constant.type == "bool":
        if isinstance(value, (bool, np.bool_)) or (
                isinstance(value, (int, np.integer)) and value in (0, 1)):
            return bool(value)
        raise ArgumentError(f"{where} (give True or False)")
    if isinstance(value, (bool, np.bool_)):
        raise ArgumentError(f"{where} (give a number)")
    if constant.type == "float":
        if not isinstance(value, (int, float, np.integer, np.floating)):
            raise ArgumentError(f"{where} (give a number)")
        number = float(value)
        try:
            struct.pack({16: "<e", 32: "<f", 64: "<d"}[constant.bits], number)
        except (OverflowError, KeyError):
            raise ArgumentError(f"{where}: out of its range") from None
        return number
    if not isinstance(value, (int, np.integer)) and not (
            isinstance(value, (float, np.floating)) and math.isfinite(value) and
            float(value).is_integer()):
        raise ArgumentError(f"{where} (give an integer)")
    number = int(value)
    low, high = ((-(1 << (constant.bits - 1)), 1 << (constant.bits - 1))
                 if constant.type == "int" else (0, 1 << constant.bits))
    if not low <= number < high:
        raise ArgumentError(f"{where}: out of its range [{low}, {high - 1}]")
    return number


def _raw(constant: SpecConstant, value: Value) -> int:
    """|value|'s bytes as the pipeline gets them, as an integer (a bool is a 32-bit VkBool32)."""
    if constant.type == "bool":
        return int(bool(value))
    if constant.type == "float":
        code = {16: "<e", 32: "<f", 64: "<d"}[constant.bits]
        return int.from_bytes(struct.pack(code, float(value)), "little")
    return int(value) & ((1 << constant.bits) - 1)


def encode_constants(constants: tuple[Specialized, ...]) -> bytes:
    """The constants in the interface layout of modpack/kinds/vulkan.h."""
    parts = [struct.pack("<I", len(constants))]
    for s in constants:
        c = s.constant
        name = (c.name or "").encode()
        flags = 0 if s.given else _FLAG_DEFAULT
        parts.append(struct.pack("<IBBBBQI", c.id, _CODES[c.type], c.bits, flags, 0,
                                 _raw(c, s.value), len(name)) + name)
    return b"".join(parts)
