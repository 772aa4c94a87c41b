"""Kernel records from OpenCL C source, read as the OpenCL compiler sees it.

1. **Preprocess** with the build options' ``-D``/``-U``/``-I`` (function-like macros too) and
   OpenCL's predefined macros, by the system C preprocessor: inactive ``#if`` branches vanish,
   macros expand (an element type set by ``-DT=float`` becomes ``float``).
2. **Reduce** the result to its top-level declarations, function bodies skipped: the parser
   never sees statements, so nothing inside a kernel can trip it.
3. **Parse** with pycparser (a real C parser), OpenCL's built-in types (``uchar``, ``half``,
   ``float4``, ...) declared in front, after recording and removing what C does not have:
   ``__kernel``, address-space qualifiers and ``__attribute__((...))``.
4. **Map** each kernel's parameters, typedefs resolved: a pointer to a scalar is a buffer of
   its dtype, a pointer to a vector type (``float4*``) a buffer of its element type (hosts pass
   arrays of the element type), ``void*``/``char*`` and pointers to structs untyped buffers
   (any dtype), a ``__local`` pointer local memory, a value a scalar. Prototypes and the
   definition of one kernel collapse into one record (they must agree).
"""

from __future__ import annotations

import re
import shlex
import subprocess
from dataclasses import replace
from typing import Any

import numpy as np
from pycparser import c_ast, c_parser
from pycparser.c_parser import ParseError

from ...compat import zip_strict
from ...errors import ArgumentError, CompileError
from ...toolchain.cc import c_compiler
from ..kernel_info import BUFFER, LOCAL, SCALAR, UNTYPED_POINTER, KernelArg, KernelInfo

__all__ = ["parse_kernel_signatures", "preprocess"]

_SCALARS = {
    "char": "int8", "signed char": "int8", "unsigned char": "uint8", "short": "int16",
    "unsigned short": "uint16", "int": "int32", "unsigned int": "uint32", "long": "int64",
    "unsigned long": "uint64", "float": "float32", "double": "float64", "_Bool": "bool",
}
# OpenCL's own type names: scalars as the C types they are (for 64-bit long), the rest as
# marker structs the mapping below recognises.
_PRELUDE_SCALARS = {
    "uchar": "unsigned char", "ushort": "unsigned short", "uint": "unsigned int",
    "ulong": "unsigned long", "size_t": "unsigned long", "ptrdiff_t": "long",
    "intptr_t": "long", "uintptr_t": "unsigned long", "bool": "_Bool",
}
_VECTOR_ELEMENTS = {"char": "int8", "uchar": "uint8", "short": "int16", "ushort": "uint16",
                    "int": "int32", "uint": "uint32", "long": "int64", "ulong": "uint64",
                    "float": "float32", "double": "float64", "half": "float16"}
_WIDTHS = (2, 3, 4, 8, 16)
_OPAQUE = ("image1d_t", "image1d_array_t", "image1d_buffer_t", "image2d_t", "image2d_array_t",
           "image3d_t", "sampler_t", "event_t", "queue_t", "clk_event_t", "reserve_id_t",
           "atomic_int", "atomic_uint", "atomic_long", "atomic_ulong", "atomic_float",
           "atomic_double", "atomic_flag", "half")
_MARKER = "__modpack_cl_"
_PRELUDE = "".join(
    [f"typedef {c} {name};\n" for name, c in _PRELUDE_SCALARS.items()]
    + [f"typedef struct {_MARKER}{name} {name};\n" for name in _OPAQUE]
    + [f"typedef struct {_MARKER}{e}{w} {e}{w};\n" for e in _VECTOR_ELEMENTS for w in _WIDTHS]
)
_ADDRESS_SPACES = {"__global": "global", "global": "global", "__local": "local",
                   "local": "local", "__constant": "constant", "constant": "constant",
                   "__private": "private", "private": "private", "__generic": "generic",
                   "generic": "generic"}
_ACCESS = ("__read_only", "read_only", "__write_only", "write_only", "__read_write",
           "read_write")
_KERNEL = re.compile(r"\b(?:__kernel|kernel)\b")
_WORD = re.compile(r"[A-Za-z_]\w*")
# C's own words that may stand before a declarator; any other word there must name a type.
_C_WORDS = frozenset(
    "void char short int long float double signed unsigned _Bool const volatile restrict static "
    "extern inline typedef register auto struct union enum".split())
_TAGS = ("struct", "union", "enum")
_PRELUDE_TYPES = frozenset(re.findall(r"(\w+);\n", _PRELUDE))
_SPECS_HINT = ("one spec per parameter: 'float32*' for a buffer of float, 'void*' for a buffer "
               "of any dtype, 'int32' for a scalar, 'local float32*' for __local memory")


def preprocess(source: str, build_options: str = "") -> str:
    """|source| through the C preprocessor as an OpenCL compiler would run it with
    |build_options| (only ``-D``, ``-U``, ``-I`` and ``-cl-std`` matter to it). The options
    are split on whitespace, as OpenCL implementations split them (no shell quoting)."""
    options = build_options.split()
    version = 120
    passed: list[str] = []
    i = 0
    while i < len(options):
        option = options[i]
        if option in ("-D", "-U", "-I") and i + 1 < len(options):
            passed += [option, options[i + 1]]
            i += 1
        elif option.startswith(("-D", "-U", "-I")):
            passed.append(option)
        elif option.startswith("-cl-std=CL"):
            major, _, minor = option[len("-cl-std=CL"):].partition(".")
            if major.isdigit():
                version = int(major) * 100 + int(minor or 0) * 10
        i += 1
    predefined = [f"-D__OPENCL_VERSION__={version}", f"-D__OPENCL_C_VERSION__={version}",
                  "-DCL_VERSION_1_0=100", "-DCL_VERSION_1_1=110", "-DCL_VERSION_1_2=120",
                  "-DCL_VERSION_2_0=200", "-DCL_VERSION_3_0=300", "-D__ENDIAN_LITTLE__=1",
                  "-D__kernel_exec(X,typen)=__kernel"]
    cmd = [*c_compiler(), "-E", "-P", "-undef", "-nostdinc", "-x", "c", *predefined, *passed,
           "-"]
    try:
        proc = subprocess.run(cmd, input=source, capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise CompileError(f"reading OpenCL kernel signatures needs a C preprocessor: cannot "
                           f"run {cmd[0]!r}; install a C compiler, or pass functions=") from None
    if proc.returncode != 0:
        raise CompileError(f"preprocessing the OpenCL source failed ({shlex.join(cmd)}):\n"
                           f"{proc.stderr.strip()}")
    return proc.stdout


def _top_level_items(code: str) -> list[str]:
    """The top-level declarations of preprocessed |code|, each function definition turned into
    its prototype (its body dropped)."""
    items: list[str] = []
    start = depth = 0
    body_from = -1
    i = 0
    while i < len(code):
        c = code[i]
        if c in "\"'":  # skip a string or character literal
            j = i + 1
            while j < len(code) and code[j] != c:
                j += 2 if code[j] == "\\" else 1
            i = j + 1
            continue
        if c in "({[":
            if c == "{" and depth == 0:
                head = code[start:i].rstrip()
                body_from = i if head.endswith(")") or re.search(r"\)\s*\w+$", head) else -1
            depth += 1
        elif c in ")}]":
            depth -= 1
            if c == "}" and depth == 0 and body_from >= 0:
                items.append(code[start:body_from].strip() + ";")
                start, body_from = i + 1, -1
        elif c == ";" and depth == 0:
            items.append(code[start:i + 1].strip())
            start = i + 1
        elif c == "#" and (i == 0 or code[i - 1] == "\n"):  # a pragma: drop the line
            end = code.find("\n", i)
            end = len(code) if end < 0 else end
            code = code[:i] + " " * (end - i) + code[end:]
            continue
        i += 1
    return [item for item in items if item and item != ";"]


def _strip_attributes(text: str) -> str:
    """|text| without ``__attribute__((...))`` (balanced parentheses)."""
    out, i = [], 0
    while True:
        j = text.find("__attribute__", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.find("(", j)
        depth = 0
        while k < len(text):
            depth += text[k] == "("
            depth -= text[k] == ")"
            k += 1
            if depth == 0:
                break
        i = k


def _split_params(text: str) -> list[str]:
    params, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += c in "([{"
        depth -= c in ")]}"
        if c == "," and depth == 0:
            params.append(text[start:i])
            start = i + 1
    params.append(text[start:])
    return [p.strip() for p in params if p.strip() and p.strip() != "void"]


def _resolve(node: Any, typedefs: dict[str, Any]) -> Any:
    """The type node behind |node|, typedef names followed to their definitions."""
    while isinstance(node, c_ast.TypeDecl) and isinstance(node.type, c_ast.IdentifierType):
        name = " ".join(node.type.names)
        if name not in typedefs:
            return node
        node = typedefs[name]
    return node


def _base_type(node: Any, typedefs: dict[str, Any]) -> tuple[int, Any]:
    """(pointer depth, the pointee's resolved type node)."""
    depth = 0
    node = _resolve(node, typedefs)
    while isinstance(node, (c_ast.PtrDecl, c_ast.ArrayDecl)):
        depth += 1
        node = _resolve(node.type, typedefs)
    return depth, node


def _scalar(node: Any) -> tuple[str | None, int, str]:
    """(numpy dtype name or None, lanes, a name for messages) of a resolved non-pointer type."""
    inner = node.type if isinstance(node, c_ast.TypeDecl) else node
    if isinstance(inner, c_ast.IdentifierType):
        words = [w for w in inner.names if w != "signed" or len(inner.names) == 1]
        name = " ".join(w for w in words if w != "int" or len(words) == 1)
        name = {"signed": "int", "unsigned": "unsigned int", "long long": "long",
                "unsigned long long": "unsigned long", "long int": "long"}.get(name, name)
        return _SCALARS.get(name), 1, name
    if isinstance(inner, c_ast.Struct) and inner.name and inner.name.startswith(_MARKER):
        builtin = inner.name[len(_MARKER):]
        if builtin == "half":
            return "float16", 1, builtin
        m = re.fullmatch(r"([a-z]+?)(\d+)", builtin)
        if m and m[1] in _VECTOR_ELEMENTS:
            return _VECTOR_ELEMENTS[m[1]], int(m[2]), builtin
        return None, 1, builtin
    if isinstance(inner, (c_ast.Struct, c_ast.Union)):
        return None, 1, f"struct {inner.name or ''}".strip()
    if isinstance(inner, c_ast.Enum):
        return "int32", 1, "enum"
    return None, 1, type(inner).__name__


def _argument(kernel: str, text: str, decl: Any, typedefs: dict[str, Any]) -> KernelArg:
    words = set(_WORD.findall(text))
    spaces = {_ADDRESS_SPACES[w] for w in words if w in _ADDRESS_SPACES}
    space = next(iter(spaces)) if spaces else None
    depth, base = _base_type(decl.type, typedefs)
    dtype, lanes, name = _scalar(base)
    if depth == 0:
        if dtype is None:
            raise ArgumentError(
                f"kernel {kernel}: parameter {text!r} has type {name}, which a kernel record "
                "cannot describe (images, samplers, structs by value); declare the kernels' "
                f"arguments with functions= instead: functions={{{kernel!r}: [...]}}, "
                f"{_SPECS_HINT}"
            )
        return KernelArg(SCALAR, np.dtype(dtype), lanes=lanes)
    if depth > 1:
        raise ArgumentError(f"kernel {kernel}: parameter {text!r} is a pointer to a pointer, which "
                            "kernels cannot take")
    untyped = dtype is None or name in ("char", "void")
    if space == "local":
        return KernelArg(LOCAL, None if untyped else np.dtype(dtype), address_space="local")
    if untyped:
        return replace(UNTYPED_POINTER, address_space=space or "global")
    return KernelArg(BUFFER, np.dtype(dtype), address_space=space or "global")


def _declared_types(items: list[str]) -> set[str]:
    """The type names |items| (top-level declarations) define with ``typedef``, and OpenCL's."""
    names = set(_PRELUDE_TYPES)
    for item in items:
        if not re.match(r"\s*typedef\b", item):
            continue
        declarators = item[item.rfind("}") + 1:] if "}" in item else item
        for declarator in re.sub(r"\[[^]]*\]", " ", declarators).rstrip(";").split(","):
            pointer = re.search(r"\(\s*\*\s*(\w+)\s*\)", declarator)  # (*name)(...)
            words = _WORD.findall(declarator)
            if pointer:
                names.add(pointer[1])
            elif words:
                names.add(words[-1])
    return names


def _unknown_type(item: str, known: set[str]) -> str | None:
    """The first word |item| uses as a type (before a declarator: another word or '*') that is
    neither C's nor declared (|known|), or None."""
    tokens: list[str] = re.findall(r"[A-Za-z_]\w*|\S", item)
    for i, token in enumerate(tokens[:-1]):
        if (_WORD.fullmatch(token) and token not in _C_WORDS and token not in known
                and (i == 0 or tokens[i - 1] not in _TAGS)
                and (tokens[i + 1] == "*" or _WORD.fullmatch(tokens[i + 1]))):
            return token
    return None


def _unreadable(exc: ParseError, items: list[str], kernels: dict[str, list[str]],
                build_options: str) -> str:
    """Why the declarations do not parse, for a person: the type the source uses without
    declaring it (which kernel, which parameter) where that is the cause, else the
    declaration the parser stopped in (pycparser's line and column count lines of modpack's
    own prelude, meaningless to the reader); then how to declare the arguments instead."""
    after = f"after preprocessing with build options {build_options!r}" if build_options \
        else "after preprocessing"
    instead = (f"or declare the kernels' arguments with functions= instead: "
               f"functions={{{next(iter(kernels))!r}: [...]}}, {_SPECS_HINT}")
    known = _declared_types(items)
    for item in items:
        unknown = _unknown_type(item, known)
        if unknown is None:
            continue
        m = re.search(r"(\w+)\s*\(", item) if "(" in item else None
        params = kernels.get(m[1], []) if m else []
        param = next((p for p in params if unknown in _WORD.findall(p)), None)
        if param is not None and m is not None:
            instead = (f"or declare the kernel's arguments with functions= instead: "
                       f"functions={{{m[1]!r}: [...]}}, {_SPECS_HINT}")
            return (f"kernel {m[1]}: parameter {param!r} has type {unknown}, which the OpenCL "
                    f"source does not declare ({after}): declare it (a typedef before the "
                    f"kernel, or its header with -I in build_options), {instead}")
        shown = " ".join(item.split())
        shown = shown if len(shown) <= 120 else shown[:117] + "..."
        return (f"the OpenCL source uses type {unknown} without declaring it ({after}), in "
                f"{shown!r}: declare it (a typedef, or its header with -I in build_options), "
                f"{instead}")
    message = str(exc)
    coordinate = re.match(r"<opencl source>:(\d+):\d+: ", message)
    if coordinate:  # the line is one of the prelude's or the items' (joined by newlines)
        line = int(coordinate[1]) - _PRELUDE.count("\n")
        for item in items:
            line -= item.count("\n") + 1
            if line <= 0:
                shown = " ".join(item.split())
                shown = shown if len(shown) <= 120 else shown[:117] + "..."
                message = f"in {shown!r}: {message[coordinate.end():]}"
                break
    message = message.removeprefix("<opencl source>: ")
    return (f"cannot read the OpenCL kernel signatures ({after}): {message}; fix the "
            f"declaration, {instead}")


def parse_kernel_signatures(source: str, build_options: str = "",
                            launch_tags: tuple[str, ...] = ()) -> list[KernelInfo]:
    """Records of the ``__kernel`` functions of OpenCL C |source| built with
    |build_options|, in the order they are first declared (see the module's docstring)."""
    code = preprocess(source, build_options)
    kernels: dict[str, list[str]] = {}  # name -> its parameter texts, from the source
    items = []
    for item in _top_level_items(code):
        item = _strip_attributes(item)
        if _KERNEL.search(item):
            m = re.search(r"(\w+)\s*\((.*)\)\s*;$", item, re.S)
            if m is None:
                raise ArgumentError(f"cannot read the kernel declaration {item[:200]!r}")
            kernels.setdefault(m[1], _split_params(m[2]))
            item = _KERNEL.sub(" ", item)
        for word in (*_ADDRESS_SPACES, *_ACCESS, "__restrict", "__restrict__", "inline"):
            item = re.sub(rf"\b{word}\b", " ", item)
        items.append(item)
    if not kernels:
        return []
    try:
        ast = c_parser.CParser().parse(_PRELUDE + "\n".join(items), "<opencl source>")
    except ParseError as exc:
        raise ArgumentError(_unreadable(exc, items, kernels, build_options)) from None
    typedefs: dict[str, Any] = {}
    declared: dict[str, KernelInfo] = {}
    for node in ast.ext:
        if isinstance(node, c_ast.Typedef):
            typedefs[node.name] = node.type
            continue
        decl = node.decl if isinstance(node, c_ast.FuncDef) else node
        if not (isinstance(decl, c_ast.Decl) and isinstance(decl.type, c_ast.FuncDecl)):
            continue
        if decl.name not in kernels:
            continue
        params = decl.type.args.params if decl.type.args else []
        params = [p for p in params if not (isinstance(p, c_ast.Typename)
                                            and _scalar(_resolve(p.type, typedefs))[2] == "void")]
        texts = kernels[decl.name]
        if len(texts) != len(params):
            raise ArgumentError(f"kernel {decl.name}: cannot match its parameters {texts}")
        info = KernelInfo(decl.name, tuple(_argument(decl.name, t, p, typedefs)
                                           for t, p in zip_strict(texts, params)),
                          launch_tags)
        earlier = declared.get(info.name)
        if earlier is None:
            declared[info.name] = info
        elif earlier != info:
            raise ArgumentError(f"kernel {info.name} is declared as {earlier.signature()} and as "
                                f"{info.signature()}")
    return [declared[name] for name in kernels if name in declared]
