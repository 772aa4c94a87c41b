"""GLSL compute source compiled to SPIR-V as the projects that write it build it: with
``glslangValidator -V``, macro definitions (``-D``), include paths (``-I``; a file's own folder
searched first), a target environment (``--target-env vulkan1.2``) and any further flags.

A file compiled many times into variants (``-DFLOAT16``, ``-DBLOCK=64``) is one
:class:`GlslOptions` per variant over one source. ``#include`` is enabled in every source that
uses it (GL_GOOGLE_include_directive, which glslc turns on by itself and glslangValidator only
when the source asks), keeping the source's line numbers in messages.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

from ...errors import ArgumentError, CompileError, UnavailableError
from ..device import check_compiler_options

__all__ = ["Defines", "GlslOptions", "compile_glsl", "tool"]

# A macro's value: None (defined, empty), a bool (1 or 0), a number or a str.
# typing.Union, not |: a type alias is evaluated at import, and CPython 3.9 has no | on types.
Defines = Union[Mapping[str, Union[str, int, float, bool, None]], Sequence[str]]
_MACRO = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TARGET = re.compile(r"(vulkan|spirv)1\.\d")
_VERSION_LINE = re.compile(r"^[ \t]*#[ \t]*version\b[^\n]*\n?", re.M)
_INCLUDE = re.compile(r"^[ \t]*#[ \t]*include\b", re.M)
_INCLUDE_EXTENSION = "GL_GOOGLE_include_directive"
# Flags modpack sets itself: passed in options they would fight its own.
_OWN_FLAGS = ("-o", "-V", "-G", "-S", "-E", "--target-env")


def tool(name: str, package: str) -> str:
    """The path of Khronos tool |name|, else UnavailableError saying which package has it."""
    path = shutil.which(name)
    if path is None:
        raise UnavailableError(f"{name} is not installed: `apt-get install {package}` "
                               "(scripts/dev.sh installs it)")
    return path


def _defines(defines: Defines | None, what: str) -> dict[str, str | None]:
    """|defines| as {name: value or None}, checked: names are C identifiers, values one line."""
    if defines is None:
        return {}
    if isinstance(defines, Mapping):
        items: Iterable[tuple[object, object]] = defines.items()
    elif isinstance(defines, (str, bytes)) or not isinstance(defines, Iterable):
        raise ArgumentError(f"{what}: defines are a dict {{'NAME': value}} or a list of "
                            f"'NAME' or 'NAME=VALUE', not {defines!r}")
    else:
        items = []
        for d in defines:
            if not isinstance(d, str):
                raise ArgumentError(f"{what}: defines holds {d!r}; each is 'NAME' or 'NAME=VALUE'")
            macro, eq, body = d.partition("=")
            items.append((macro, body if eq else None))
    out: dict[str, str | None] = {}
    for name, value in items:
        if not isinstance(name, str) or not _MACRO.fullmatch(name):
            raise ArgumentError(f"{what}: define {name!r} is not a macro name (a C identifier)")
        if value is not None and not isinstance(value, (str, int, float)):
            raise ArgumentError(f"{what}: define {name} = {value!r}: a value is a str, a number, "
                                "a bool (1 or 0) or None (defined, empty)")
        text = (None if value is None else ("1" if value else "0") if isinstance(value, bool)
                else str(value))
        if text is not None and ("\n" in text or "\r" in text):
            raise ArgumentError(f"{what}: define {name}'s value spans lines")
        out[name] = text
    return out


@dataclass(frozen=True)
class GlslOptions:
    """How a GLSL source is compiled: macros (later ones win), include folders, the target
    environment and further glslangValidator flags."""

    defines: dict[str, str | None] = field(default_factory=dict)
    include_dirs: tuple[Path, ...] = ()
    target_env: str | None = None
    options: tuple[str, ...] = ()

    @classmethod
    def make(cls, defines: Defines | None, include_dirs: Iterable[str | os.PathLike[str]] | None,
             target_env: str | None, options: Sequence[str] | None, what: str) -> GlslOptions:
        """Checked options from what vulkan_module takes."""
        dirs: list[Path] = []
        if include_dirs is not None:
            if isinstance(include_dirs, (str, bytes, os.PathLike)):
                include_dirs = [include_dirs]
            for d in include_dirs:
                if not isinstance(d, (str, os.PathLike)) or not Path(d).is_dir():
                    raise ArgumentError(f"{what}: include_dirs holds {d!r}, which is not a "
                                        "folder")
                dirs.append(Path(d).resolve())
        if target_env is not None and (not isinstance(target_env, str) or
                                       not _TARGET.fullmatch(target_env)):
            raise ArgumentError(f"{what}: target_env {target_env!r} is not a target environment "
                                "such as 'vulkan1.2' or 'spirv1.5'")
        flags = check_compiler_options(options, what) if options is not None else []
        for flag in flags:
            if flag.split("=")[0] in _OWN_FLAGS:
                raise ArgumentError(f"{what}: options holds {flag!r}, which modpack sets itself "
                                    "(use target_env=, defines=, include_dirs=)")
        return cls(_defines(defines, what), tuple(dirs), target_env, tuple(flags))

    def with_defines(self, defines: Defines | None, what: str) -> GlslOptions:
        """These options with |defines| added (winning over this set's of the same name)."""
        return GlslOptions({**self.defines, **_defines(defines, what)}, self.include_dirs,
                           self.target_env, self.options)

    def arguments(self) -> list[str]:
        args = ["--target-env", self.target_env] if self.target_env else []
        args += [f"-I{d}" for d in self.include_dirs]
        args += [f"-D{k}" if v is None else f"-D{k}={v}" for k, v in self.defines.items()]
        return args + list(self.options)


def _with_includes(source: str) -> str:
    """|source| with #include enabled when it includes, its line numbers kept (a #line)."""
    if not _INCLUDE.search(source) or _INCLUDE_EXTENSION in source:
        return source
    version = _VERSION_LINE.search(source)
    if version is None:
        return source  # glslangValidator says what is wrong
    line = source.count("\n", 0, version.end()) + 1
    head = source[:version.end()] + ("" if version.group().endswith("\n") else "\n")
    return (head + f"#extension {_INCLUDE_EXTENSION} : require\n#line {line}\n" +
            source[version.end():])


def compile_glsl(source: str, what: str, options: GlslOptions | None = None,
                 path: Path | None = None) -> bytes:
    """GLSL compute source -> SPIR-V, by ``glslangValidator -V`` (CompileError with its log).
    |path|: the file the source was read from, whose folder is searched first for includes and
    whose name the log then shows."""
    compiler = tool("glslangValidator", "glslang-tools")
    options = options or GlslOptions()
    own = [f"-I{path.parent.resolve()}"] if path is not None else []
    with tempfile.TemporaryDirectory(prefix="modpack-glsl-") as work:
        src, out = Path(work) / "shader.comp", Path(work) / "shader.spv"
        src.write_text(_with_includes(source))
        command = [compiler, "-V", "-S", "comp", *own, *options.arguments(), str(src), "-o",
                   str(out)]
        proc = subprocess.run(command, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            shown = str(path) if path is not None else what
            log = (proc.stdout + proc.stderr).replace(str(src), shown).strip()
            flags = "".join(f" {flag}" for flag in command[4:-3])
            raise CompileError(f"{what}: glslangValidator -V{flags} failed:\n{log}")
        return out.read_bytes()
