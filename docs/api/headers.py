"""A Sphinx extension that renders the C and C++ headers into the reference, read from
csrc/include at each build, so that the pages cannot drift from them:

    .. modpack-c-header:: modpack/modpack.h     (csrc/include/modpack/modpack.h)
    .. modpack-cpp-header:: modpack/modpack.hpp

Why not Breathe (Doxygen) or Hawkmoth (libclang): both read only documentation comments
(``/** ... */``, ``///``), and the headers document every declaration with plain ``/* */``
comments, the house style; both also bring a native tool (Doxygen, libclang) to install. What
the headers need is small: a comment documents what follows it.

A header is read as a sequence of comments and declarations. A banner comment
(``/* ---- loading ---- */``) starts a section; a comment documents the declarations that follow
it. Functions become ``c:function`` (``cpp:function``) entries, ``#define`` constants and
macros ``c:macro``, typedef names ``c:type``, classes ``cpp:class``; structs and enums are shown
as written, comments and all. A declaration Sphinx's C or C++ parser does not take is shown as
code. Private names (``MP__*``, ``mp_*__*``, ``namespace detail``) are left out. No dependency
beyond Sphinx.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from docutils.statemachine import StringList

INCLUDE = Path(__file__).resolve().parents[2] / "csrc" / "include"

_BANNER = re.compile(r"^-{2,}\s*(.*?)\s*-*$", re.S)
_PRIVATE = re.compile(r"\b(MP__\w*|mp__\w*|mp_\w*?__\w*|_mp_\w*)\b")
_SKIP_DIRECTIVES = ("#include", "#if", "#ifdef", "#ifndef", "#else", "#elif", "#endif",
                    "#error", "#pragma", "#undef")


@dataclass
class Item:
    """A comment (``comment``), a preprocessor line (``define``) or a declaration (``decl``)
    of a header, with its text as written."""

    kind: str
    text: str
    blank_before: bool = False  # a blank line before it: a comment above is not its own


def split(source: str) -> list[Item]:
    """|source| as its top-level comments, preprocessor lines and declarations, in order (a
    declaration ends with ``;`` at depth 0, or with its body's ``}``; line comments are
    comments too)."""
    items: list[Item] = []
    i, n = 0, len(source)
    start = None  # where the declaration being read began
    depth = 0
    last = 0  # where the last item ended

    def add(kind: str, begin: int, end: int) -> None:
        nonlocal last
        gap = re.sub(r"[ \t]", "", source[last:begin])
        items.append(Item(kind, source[begin:end], "\n\n" in gap))
        last = end
    while i < n:
        c = source[i]
        if source.startswith("/*", i):
            end = source.find("*/", i + 2)
            end = n if end < 0 else end + 2
            if start is None:
                add("comment", i, end)
            i = end
            continue
        if source.startswith("//", i):
            end = source.find("\n", i)
            end = n if end < 0 else end
            if start is None:
                add("comment", i, end)
            i = end
            continue
        if c == "#" and start is None and (i == 0 or source[i - 1] == "\n"
                                           or source[:i].rstrip(" ").endswith("\n")):
            end = i
            while True:  # to the end of the line, continued lines included
                end = source.find("\n", end)
                if end < 0:
                    end = n
                    break
                if source[end - 1] != "\\":
                    break
                end += 1
            add("define", i, end)
            i = end
            continue
        if c in "\"'":
            end = i + 1
            while end < n and source[end] != c:
                end += 2 if source[end] == "\\" else 1
            i = end + 1
            continue
        if c.isspace():
            i += 1
            continue
        if c == "}" and depth == 0:  # the end of an extern "C" or namespace block
            i += 1
            continue
        if c == "{" and depth == 0 and start is not None and re.fullmatch(
                r'extern\s+"C"\s*|namespace\s+\w+\s*', source[start:i]):
            start = None  # its contents are read as top-level declarations
            last = i + 1
            i += 1
            continue
        if start is None:
            start = i
        if c in "({[":
            depth += 1
        elif c in ")}]":
            depth -= 1
            if depth == 0 and c == "}":
                rest = source[i + 1:].lstrip(" ")
                # a body ends the declaration, unless a name or ';' follows it (a typedef's,
                # a class's)
                if not rest.startswith((";", "\n;")) and not re.match(r"\w", rest):
                    add("decl", start, i + 1)
                    start = None
        elif c == ";" and depth == 0:
            add("decl", start, i + 1)
            start = None
        i += 1
    return items


def comment_text(comment: str) -> str:
    """A comment's text without its markers and leading asterisks, indentation kept."""
    if comment.startswith("//"):
        return comment[2:].strip()
    body = comment[2:-2]
    lines = [re.sub(r"^\s*\* ?", "", line) if re.match(r"^\s*\*", line) else line.strip()
             for line in body.splitlines()]
    while lines and not lines[0].strip():
        lines.pop(0)
    while lines and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)


_BEFORE = set(" \t-:/'\"<([{")  # what may precede inline markup (docutils' rule)
_AFTER = set(" \t-.,:;!?\\/'\")]}>")  # and follow it


def _inline(text: str) -> str:
    """|text| as reST, with nothing read as markup: |param| and `code` as literals, every
    other character reST might take for markup escaped."""
    parts = re.split(r"(\|[A-Za-z_][\w.\->]*\||`[^`]+`)", text)
    out = ""
    for k, part in enumerate(parts):
        literal = part[1:-1].replace("`", "").strip()
        if part[:1] in "|`" and part[-1:] == part[:1] and len(part) > 2 and literal:
            if out and out[-1] not in _BEFORE:
                out += "\\ "
            out += f"``{literal}``"
            after = parts[k + 1][:1] if k + 1 < len(parts) else ""
            if after and after not in _AFTER:
                out += "\\ "
        else:
            out += re.sub(r"([\\*_`|\[\]<>])", r"\\\1", part)
    return out


def prose(text: str) -> list[str]:
    """The reST lines of a comment's text: paragraphs; items of a list ("- ..."); and lines
    indented after a blank line (examples, tables) as code."""
    lines: list[str] = []
    code: list[str] = []
    paragraph: list[str] = []

    def flush() -> None:
        if code:
            indent = min(len(b) - len(b.lstrip()) for b in code if b.strip())
            lines.extend(["", ".. code-block:: none", "",
                          *("   " + b[indent:] for b in code), ""])
            code.clear()
        if paragraph:
            joined = " ".join(p.strip() for p in paragraph)
            if joined.startswith("- "):
                lines.extend(["", "- " + _inline(joined[2:]), ""])
            else:
                joined = re.sub(r"^([-+*#=:.]|\d+[.)])", r"\\\1", joined)
                lines.extend(["", _inline(joined), ""])
            paragraph.clear()

    for line in text.splitlines():
        if not line.strip():
            if not code:
                flush()
            elif code and code[-1].strip():
                code.append("")
            continue
        indented = line.startswith("  ")
        if code and (indented or not line.strip()):
            code.append(line)
        elif indented and not paragraph:
            flush()
            code.append(line)
        elif line.lstrip().startswith("- ") and not line.startswith("   "):
            flush()
            paragraph.append(line.strip())
        else:
            if code:
                flush()
            paragraph.append(line)
    while code and not code[-1].strip():
        code.pop()
    flush()
    return lines


def _strip_bodies(decl: str) -> str:
    """A function's declaration without its body (``{...}`` replaced by ``;``)."""
    out, depth = [], 0
    for c in decl:
        if c == "{":
            depth += 1
            if depth == 1:
                out.append(";")
            continue
        if c == "}":
            depth -= 1
            continue
        if depth == 0:
            out.append(c)
    return re.sub(r";\s*;", ";", "".join(out)).strip()


def _parses(domain: str, kind: str, signature: str, env: Any) -> bool:
    """Whether Sphinx's |domain| ("c", "cpp") parser takes |signature| as a |kind|."""
    try:
        if domain == "c":
            from sphinx.domains.c._parser import DefinitionParser
        else:
            from sphinx.domains.cpp._parser import DefinitionParser
    except ImportError:  # Sphinx before 7.2 kept them in the domain's module
        if domain == "c":
            from sphinx.domains.c import DefinitionParser
        else:
            from sphinx.domains.cpp import DefinitionParser
    try:
        parser = DefinitionParser(signature, location=None, config=env.config)
        if kind == "macro":
            parser.parse_declaration("macro", "macro")
        elif domain == "cpp" and kind == "class":
            parser.parse_declaration("class", "class")
        else:
            parser.parse_declaration(kind if domain == "cpp" else
                                     {"function": "function", "type": "type"}[kind], kind)
        parser.assert_end()
        return True
    except Exception:
        return False


def _code(text: str) -> list[str]:
    return ["", ".. code-block:: c" if "::" not in text else ".. code-block:: cpp", "",
            *("   " + line for line in _dedent(text).splitlines()), ""]


def _dedent(text: str) -> str:
    lines = text.splitlines()
    rest = [line for line in lines[1:] if line.strip()]
    indent = min((len(line) - len(line.lstrip()) for line in rest), default=0)
    return "\n".join([lines[0], *(line[indent:] for line in lines[1:])]) if lines else text


def _directive(domain: str, kind: str, signature: str, doc: list[str], env: Any,
               shown: str | None = None) -> list[str]:
    """A domain entry for |signature| with |doc| (and |shown| as code), or the code alone."""
    one_line = " ".join(signature.split())
    if _parses(domain, kind, one_line, env):
        out = ["", f".. {domain}:{kind}:: {one_line}", ""]
        out += ["   " + line if line else "" for line in doc]
        if shown is not None:
            out += ["   " + line if line else "" for line in _code(shown)]
        return out
    return [*doc, *_code(shown if shown is not None else signature)]


_FUNCTION = ".. c:function:: "


def c_lines(header: str, env: Any) -> list[str]:
    """The reST of the C header at |header| (relative to csrc/include)."""
    text = (INCLUDE / header).read_text()
    items = split(text)
    out: list[str] = []
    doc: list[str] = []
    first = True
    seen: set[str] = set()  # a macro defined in two #if branches is shown once
    # Functions declared together under one comment (no blank line, no comment between) are
    # one entry with a signature each: where the next signature goes, while one is open.
    group: int | None = None
    for item in items:
        if item.kind == "comment":
            group = None
            body = comment_text(item.text)
            if body.strip() in ("MP_API_BEGIN", "MP_API_END") or body.startswith("clang-format"):
                continue
            banner = _BANNER.match(body.splitlines()[0] if body else "")
            if banner and body.startswith("--"):
                title = banner.group(1).rstrip("-").strip() or "more"
                rest = "\n".join(body.splitlines()[1:])
                out += ["", title[:1].upper() + title[1:], "~" * len(title), ""]
                out += prose(rest) if rest.strip() else []
                doc = []
                continue
            if first:  # the header's own comment: what it is for
                out += prose(_without_name(body))
                first = False
                continue
            doc = prose(body)
            continue
        first = False
        if item.blank_before:
            doc = []
            group = None
        if item.kind == "define":
            group = None
            name = re.match(r"#\s*define\s+(\w+)", item.text)
            if name and name[1] not in seen:
                seen.add(name[1])
                shown = _define(item.text, doc, env)
                out += shown
                doc = doc if not shown else []  # one comment over a run: on its first entry
            continue
        lines = _c_declaration(item.text, doc, env)
        if lines[1:2] and lines[1].startswith(_FUNCTION):
            if group is not None:  # one more signature of the entry above: its comment's
                out.insert(group, " " * len(_FUNCTION) + lines[1][len(_FUNCTION):])
                group += 1
                continue
            group = len(out) + 2
        else:
            group = None
        out += lines
        doc = doc if not lines else []
    return out


def _define(line: str, doc: list[str], env: Any) -> list[str]:
    if line.startswith(_SKIP_DIRECTIVES):
        return []
    m = re.match(r"#define\s+(\w+(?:\([^)]*\))?)\s*(.*)", line, re.S)
    if not m or _PRIVATE.search(m[1]) or m[1].endswith(("_H_", "_HPP_")) or m[1] == "MP_API":
        return []
    name, value = m[1], m[2].strip()
    shown = None if "\\\n" in value or len(value) > 60 else value
    body = list(doc)
    if shown:
        body += ["", f"``{shown}``" if "``" not in shown else shown, ""]
    return _directive("c", "macro", name, body, env)


def _c_declaration(decl: str, doc: list[str], env: Any) -> list[str]:
    text = decl.strip()
    if text.startswith(("extern \"C\"", "}")) or "_Static_assert" in text \
            or text.startswith("static_assert"):
        return []
    head = text.split("(")[0]
    if _PRIVATE.search(head):
        return []
    if text.startswith("typedef struct") and "{" not in text:  # an opaque handle
        name = text.rstrip(";").split()[-1]
        return _directive("c", "type", name, doc, env, shown=text)
    if text.startswith(("typedef struct", "typedef union", "typedef enum")):
        name = text.rstrip(";").split("}")[-1].strip()
        return _directive("c", "type", name, doc, env, shown=text)
    if text.startswith("typedef"):
        m = re.search(r"\(\s*\*\s*(\w+)\s*\)", text) or re.search(r"(\w+)\s*;$", text)
        if m:
            return _directive("c", "type", m[1], doc, env, shown=text)
        return [*doc, *_code(text)]
    if text.startswith(("enum", "struct")):
        return [*doc, *_code(text)]
    if "(" in text and "=" not in head:
        signature = _strip_bodies(text).rstrip(";")
        signature = re.sub(r"\b(MP_API|static|inline|MP_EXPORT_ATTR)\s+", "", signature)
        signature = re.sub(r"__attribute__\s*\(\(.*?\)\)", "", signature).strip()
        return _directive("c", "function", signature, doc, env)
    return [*doc, *_code(text)]


def cpp_lines(header: str, env: Any) -> list[str]:
    """The reST of the C++ header |header|: its namespace's classes and functions."""
    text = (INCLUDE / header).read_text()
    body = text[text.index("namespace modpack {") + len("namespace modpack {"):]
    items = split(_without_namespace(body, "detail"))
    out = prose(_cpp_intro(text))
    doc: list[str] = []
    for item in items:
        if item.kind == "define":
            continue
        if item.kind == "comment":
            inner = comment_text(item.text)
            banner = _BANNER.match(inner.splitlines()[0] if inner else "")
            if banner and inner.startswith("--"):
                title = banner.group(1).rstrip("-").strip()
                out += ["", title[:1].upper() + title[1:], "~" * len(title), ""]
                doc = []
            else:
                doc = prose(inner)
            continue
        if item.blank_before:
            doc = []
        decl = item.text.strip()
        if decl.startswith("namespace detail") or decl.startswith("}"):
            doc = []
            continue
        m = re.match(r"(?:template\s*<[^>]*>\s*)?(class|struct)\s+(\w+)", decl)
        if m and decl.rstrip().endswith(";") and "{" not in decl:  # a forward declaration
            doc = []
            continue
        if m:
            head = decl.split("{")[0].strip()
            out += _directive("cpp", "class", f"modpack::{head.split(None, 1)[1]}"
                              if not head.startswith("template") else head, doc, env,
                              shown=_class_outline(decl))
        elif "(" in decl:
            signature = _strip_bodies(decl).rstrip(";")
            signature = re.sub(r"\binline\s+", "", signature)
            out += _directive("cpp", "function", signature, doc, env)
        else:
            out += [*doc, *_code(decl)]
        doc = []
    return out


def _cpp_intro(text: str) -> str:
    return _without_name(comment_text(text[:text.index("*/") + 2]))


def _without_name(intro: str) -> str:
    """A header's opening comment without its own name ("modpack/kind.h — for code that
    ..." reads "For code that ...")."""
    head, dash, rest = intro.partition(" — ")
    if not dash or "\n" in head:
        return intro
    return rest[:1].upper() + rest[1:]


def _class_outline(decl: str) -> str:
    """A class as its users read it: its public members' declarations and comments, without
    the bodies of its functions (nor their member initializers) or its private part."""
    out: list[str] = []
    depth = 0
    private = False
    in_comment = False
    parens = 0
    for line in decl.splitlines():
        stripped = line.strip()
        if depth == 1 and stripped in ("private:", "protected:"):
            private = True
            continue
        if depth == 1 and stripped == "public:":
            private = False
            out.append(line)
            continue
        start = depth
        kept = ""
        for ch in line:  # (braces in comments and strings are not the headers' habit)
            parens += {"(": 1, ")": -1}.get(ch, 0) if depth <= 1 else 0
            if parens > 0 and depth <= 1:  # a default argument's {} is no body
                kept += ch
            elif ch == "{":
                depth += 1
                kept += ch if depth == 1 else (";" if depth == 2 else "")
            elif ch == "}":
                depth -= 1
                kept += ch if depth == 0 else ""
            elif depth <= 1:
                kept += ch
        if private and start >= 1 and depth >= 1 and not in_comment:
            continue
        kept = re.sub(r"\)((?:\s*(?:const|noexcept|override|final))*)\s*:\s[^;]*;$", r")\1;",
                      kept.rstrip())
        kept = re.sub(r"\s+;$", ";", kept)
        if kept.strip() and kept.strip() != ";" and not (start >= 2 and depth >= 2):
            out.append(kept)
    return "\n".join(out)


def _without_namespace(text: str, name: str) -> str:
    """|text| without the block ``namespace |name| { ... }`` (brace-matched)."""
    at = text.find(f"namespace {name} {{")
    while at >= 0:
        depth, i = 0, text.index("{", at)
        while i < len(text):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
            if depth == 0:
                break
        text = text[:at] + text[i:]
        at = text.find(f"namespace {name} {{")
    return text


class _Rendered(Directive):
    required_arguments = 0
    optional_arguments = 1

    def lines(self) -> list[str]:
        raise NotImplementedError

    def run(self) -> list[nodes.Node]:
        env = self.state.document.settings.env
        if self.arguments:
            env.note_dependency(str(INCLUDE / self.arguments[0]))
        content = StringList(self.lines(), source=f"<{self.name} {' '.join(self.arguments)}>")
        holder = nodes.section()
        holder.document = self.state.document
        self.state.nested_parse(content, self.content_offset, holder, match_titles=True)
        return holder.children


class CHeader(_Rendered):
    required_arguments = 1

    def lines(self) -> list[str]:
        return c_lines(self.arguments[0], self.state.document.settings.env)


class CppHeader(_Rendered):
    required_arguments = 1

    def lines(self) -> list[str]:
        return cpp_lines(self.arguments[0], self.state.document.settings.env)


def setup(app: Any) -> dict[str, Any]:
    app.add_directive("modpack-c-header", CHeader)
    app.add_directive("modpack-cpp-header", CppHeader)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
