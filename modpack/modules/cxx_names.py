"""C++ kernels by name expression, for the kinds whose compilers take C++ (cuda: NVRTC and
nvcc; rocm: clang's HIP): ``"gemm<float, 128>"``, ``"ops::softmax"``, ``"matmul<floatX>"``, or,
for one of several overloads, its signature: ``"scale(double*, double)"``.

A record keeps the expression as its name (what callers look up) and the mangled symbol the
compiled code defines. Only the compiler knows which symbol an expression names: it resolves
typedefs (``floatX`` is ``__nv_bfloat16``), default template arguments, overloads and
namespaces, and it spells template arguments its own way (``16u``, ``(char)1``); matching the
expression's text against demangled symbols gets all of these wrong. NVRTC answers the question
itself (``nvrtcGetLoweredName``); for nvcc and clang modpack asks it with a probe: a second,
cheap compile of the source plus, for each expression *i*, one explicit instantiation

    template <int I, typename T, T F> __global__ void modpack_name_expression_probe() {}
    template __global__ void modpack_name_expression_probe<i, decltype(&EXPR), &EXPR>();

The compiler must resolve ``&EXPR`` to one function to instantiate it (an expression naming
nothing, or an ambiguous overload, is its compile error), and the probe kernel's mangled name
then holds that function's own mangled name as a template argument. Demangled, it reads
``void modpack_name_expression_probe<0, void (*)(float*), &(void k<16u>(float*))>()``: the
function's qualified name as the demangler prints the kernel's own symbol, and its parameters
in the pointer type (the nested signature itself is sometimes abbreviated: ``&ops::zero``),
which together find it among the real build's kernels. The probe kernels live only in the
probe's output (PTX or LLVM IR); the build that is shipped gets the expressions' addresses taken
in host code instead (:func:`instantiation_source`), which instantiates the kernels and adds no
device code.

Code compiled elsewhere (binaries) has no compiler to ask: there an expression is matched by
the demangled names (:func:`lower_by_demangled`), spelled as the demangler spells them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from ..compat import zip_strict
from ..errors import ArgumentError, CompileError
from ..toolchain.demangle import demangle, is_mangled

__all__ = ["PROBE", "check_name_expressions", "compact", "hinted", "instantiation_source",
           "lower_by_demangled", "lower_from_probe", "nvrtc_expression", "overload_hint",
           "pointer_expression", "probe_source", "record_names", "split_signature",
           "split_top_level"]

PROBE = "modpack_name_expression_probe"
_QUALIFIED_NAME = re.compile(r"(::)?[A-Za-z_]\w*(\s*::\s*[A-Za-z_]\w*)*\s*(<.*>)?", re.S)
_CASTS = ("static_cast", "reinterpret_cast", "const_cast", "dynamic_cast")


def check_name_expressions(expressions: Iterable[str]) -> list[str]:
    """The expressions, stripped, each a non-empty str and given once."""
    if isinstance(expressions, (str, bytes)):
        raise ArgumentError("name_expressions must be a list such as ['gemm<float, 128>'], not a "
                            "str")
    out = []
    for expr in expressions:
        if not isinstance(expr, str) or not expr.strip():
            raise ArgumentError(f"name_expressions: {expr!r} is not a C++ name expression such as "
                                "'gemm<float, 128>'")
        out.append(expr.strip().removeprefix("&").strip())
    twice = sorted({e for e in out if out.count(e) > 1})
    if twice:
        raise ArgumentError(f"name_expressions has duplicates: {twice}")
    return out


def _signature_form(expr: str) -> tuple[str, str] | None:
    """(name, parameter list) of an expression written as a signature, ``"scale(double*,
    double)"``; None for a name (``"gemm<float, 128>"``) or any other expression."""
    if not expr.endswith(")"):
        return None
    try:
        name, params = split_signature(expr)
    except ArgumentError:
        return None
    if not _QUALIFIED_NAME.fullmatch(name) or name.split("<")[0].strip() in _CASTS:
        return None
    return name, ", ".join(params)


def pointer_expression(expr: str) -> str:
    """C++ for a pointer to the kernel |expr| names: ``&expr``, or, for a signature, the cast
    that picks that overload (``static_cast<void (*)(double*, double)>(&scale)``)."""
    signature = _signature_form(expr)
    if signature is None:
        return f"&{expr}"
    name, params = signature
    return f"static_cast<void (*)({params})>(&{name})"


def overload_hint(log: str, expressions: Sequence[str]) -> str:
    """What to do when a compile with name |expressions| failed because one names an
    overloaded kernel (the compiler's |log| says so): "" when it does not."""
    if not expressions or "overloaded function" not in log:
        return ""
    return ("\n(a name expression that names an overloaded kernel must pick one by its "
            "signature: name_expressions=['scale(float*, float)'])")


def hinted(exc: CompileError, expressions: Sequence[str]) -> CompileError:
    """|exc|, with :func:`overload_hint` added when it applies."""
    hint = overload_hint(str(exc), expressions)
    return CompileError(f"{exc}{hint}") if hint else exc


def nvrtc_expression(expr: str) -> str:
    """What NVRTC is given for |expr| (``nvrtcAddNameExpression``): the expression exactly as
    written, so that its own lowering resolves it, except a signature, which becomes the cast
    that picks the overload."""
    return expr if _signature_form(expr) is None else pointer_expression(expr)


def instantiation_source(source: str, expressions: Sequence[str]) -> str:
    """|source| with the address of each expression taken in host code, which makes the
    compiler instantiate (and emit) every listed kernel, and adds no device code."""
    refs = ", ".join(f"(const void*){pointer_expression(e)}" for e in expressions)
    return (f"{source}\n\n/* added by modpack: instantiate the name expressions */\n"
            f"static const void* const modpack_name_expressions[] __attribute__((unused)) = "
            f"{{{refs}}};\n")


def probe_source(source: str, expressions: Sequence[str]) -> str:
    """|source| with the probe that makes the compiler say which function each expression
    names (see the module's docstring); compiled only to read its symbols."""
    lines = [source, "", "/* added by modpack: which function each name expression names */",
             f"template <int I, typename T, T F> __global__ void {PROBE}() {{}}"]
    for i, expr in enumerate(expressions):
        signature = _signature_form(expr)
        if signature is None:
            kind, ref = f"decltype(&{expr})", f"&{expr}"
        else:
            kind, ref = f"void (*)({signature[1]})", f"&{signature[0]}"
        lines.append(f"template __global__ void {PROBE}<{i}, {kind}, {ref}>();")
    return "\n".join(lines) + "\n"


def lower_from_probe(expressions: Sequence[str], probe_symbols: Iterable[str],
                     kernels: Iterable[str], compiler: str) -> dict[str, str]:
    """Each expression's symbol among |kernels| (the real build's), read from the symbols of
    the probe's build (:func:`probe_source`) that |compiler| made."""
    probe_symbols = [s for s in probe_symbols if PROBE in s]
    named: dict[int, tuple[str, str]] = {}
    for text in demangle(probe_symbols):
        found = _probe_target(text)
        if found is not None:
            named[found[0]] = found[1:]
    kernels = list(kernels)
    readable = dict(zip_strict(kernels, demangle(kernels)))
    by_signature = {}
    for symbol, text in readable.items():
        if is_mangled(symbol) and text.endswith(")"):
            own_name, own_params = split_signature(text)
            by_signature[_key(own_name, ", ".join(own_params))] = symbol
    lowered = {}
    for i, expr in enumerate(expressions):
        if i not in named:
            raise CompileError(f"{compiler} did not instantiate name expression {expr!r} (its "
                               "probe kernel is missing from the probe's build)")
        name, params = named[i]
        symbol = by_signature.get(_key(name, params))
        if symbol is None and name in readable and not is_mangled(name):
            symbol = name  # an extern "C" kernel: found by its name
        if symbol is None:
            raise ArgumentError(f"name expression {expr!r} names {name}({params}), which is not "
                                f"a kernel {compiler} compiled (a __device__ function? kernels "
                                f"are __global__); the kernels are "
                                f"{sorted(_without_return(t) for t in readable.values())}")
        lowered[expr] = symbol
    return lowered


def _key(name: str, params: str) -> str:
    return compact(f"{name}({params})")


def _probe_target(demangled: str) -> tuple[int, str, str] | None:
    """(i, the function's qualified name, its parameter list) from a probe kernel's demangled
    name, ``void modpack_name_expression_probe<0, void (*)(float*), &(void k<16u>(float*))>()``;
    None for another symbol. The parameters are read from the pointer type: the demangler
    prints the function's own signature only where no substitution abbreviates it
    (``&ops::zero`` for ``void ops::zero(float*, long long)``)."""
    text = demangled.strip().removeprefix("void ").strip()
    if not text.startswith(f"{PROBE}<") or not text.endswith(">()"):
        return None
    args = split_top_level(text[len(PROBE) + 1:-3])
    if len(args) != 3 or not args[0].isdigit():
        return None
    kind = args[1].strip()  # "void (*)(float*, int)"; a __device__ function's may return more
    if "(*)" not in kind or not kind.endswith(")"):
        return None
    listed = kind[kind.index("(*)") + 3:].strip()
    if not listed.startswith("("):
        return None
    params = ", ".join(split_top_level(listed[1:-1]))
    target = args[2].strip().removeprefix("&").strip()
    if target.startswith("(") and target.endswith(")") and _balanced(target[1:-1]):
        target = target[1:-1].strip()
    name = split_signature(target)[0] if target.endswith(")") else target
    return int(args[0]), name, "" if params == "void" else params


def _balanced(text: str) -> bool:
    depth = 0
    for ch in text:
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:
            return False
    return depth == 0


def lower_by_demangled(expressions: Sequence[str], symbols: Iterable[str], where: str
                       ) -> dict[str, str]:
    """Each expression's symbol among |symbols| (kernels compiled elsewhere: no compiler to
    ask), matched by the demangled name (``"ns::k<float, 2>"``) or, for one of several
    overloads, the demangled signature (``"scale(double*, double)"``), spaces ignored."""
    symbols = list(symbols)
    texts = demangle(symbols)
    candidates: dict[str, list[str]] = {}
    for symbol, text in zip_strict(symbols, texts):
        name = split_signature(text)[0] if text.endswith(")") else text
        keys = {compact(name)} | ({compact(_without_return(text))} if text.endswith(")") else set())
        for key in keys:
            candidates.setdefault(key, []).append(symbol)
    lowered = {}
    for expr in expressions:
        found = candidates.get(compact(expr), [])
        if len(found) == 1:
            lowered[expr] = found[0]
            continue
        if found:
            shown = [_without_return(t) for s, t in zip(symbols, texts) if s in found]
            raise ArgumentError(f"name expression {expr!r} matches {len(found)} kernels in "
                                f"{where} ({shown}): name one by its signature")
        shown = sorted(_without_return(t) for t in texts)
        raise ArgumentError(f"name expression {expr!r} matches no kernel in {where} (it has "
                            f"{shown}); code compiled elsewhere is matched by the demangled "
                            "names: write the expression as they spell it")
    return lowered


def record_names(symbols: Sequence[str]) -> dict[str, str]:
    """The name each kernel's record gets when no expression names it: an extern "C"
    symbol as it is; a C++ one by its demangled qualified name (``"ops::zero"``,
    ``"transpose<16u>"``) where that is the only kernel of that name, else, for overloads, by
    its signature (``"scale(double*, double)"``). Either is an expression that names it."""
    if not any(is_mangled(s) for s in symbols):
        return {s: s for s in symbols}
    texts = demangle(list(symbols))
    short = {s: (split_signature(t)[0] if is_mangled(s) and t.endswith(")") else s)
             for s, t in zip_strict(symbols, texts)}
    counts: dict[str, int] = {}
    for name in short.values():
        counts[name] = counts.get(name, 0) + 1
    return {s: (short[s] if counts[short[s]] == 1 else _without_return(t))
            for s, t in zip_strict(symbols, texts)}


def _without_return(demangled: str) -> str:
    """``"void k<1>(float*)"`` -> ``"k<1>(float*)"`` (template functions demangle with their
    return type)."""
    if not demangled.endswith(")"):
        return demangled
    name, params = split_signature(demangled)
    return f"{name}({', '.join(params)})"


def split_signature(demangled: str) -> tuple[str, list[str]]:
    """``"void ns::k<float, 2>(float*, int)"`` -> ``("ns::k<float, 2>", ["float*", "int"])``."""
    text = demangled.strip()
    if not text.endswith(")"):
        raise ArgumentError(f"{demangled!r} is not a function signature")
    depth, start = 0, -1
    for i in range(len(text) - 1, -1, -1):
        depth += {")": 1, "(": -1}.get(text[i], 0)
        if depth == 0:
            start = i
            break
    if start <= 0:
        raise ArgumentError(f"{demangled!r} is not a function signature")
    name, params = text[:start].strip(), split_top_level(text[start + 1:-1])
    # Template functions demangle with their return type; kernels return void.
    if "<" in name and name.startswith("void "):
        name = name.removeprefix("void ").strip()
    return name, [] if params == ["void"] else params


def compact(text: str) -> str:
    """|text| without whitespace: ``"k<float,2>"`` is ``"k<float, 2>"``."""
    return re.sub(r"\s+", "", text)


def split_top_level(text: str) -> list[str]:
    """|text| split at the commas outside <>, () and []."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch in "<([":
            depth += 1
        elif ch in ">)]":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    last = "".join(current).strip()
    return [*parts, last] if last or parts else []
