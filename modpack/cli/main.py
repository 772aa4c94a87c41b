"""``modpack <command>``: a dispatcher over subcommands.

Each subcommand is one ``_add_<name>`` function that adds its parser and sets ``run`` to the
function executing it (which returns the exit status). Errors modpack anticipates (bad files,
missing files) print one line on stderr and exit with status 1; usage errors exit with 2.

    modpack inspect deploy.so          # blob header, module table, import tree, host functions
    modpack inspect deploy.so --json   # the same as JSON (a stable contract for tools)
    modpack sign deploy.so --key key.pem       # add an Ed25519 signature (cli/trust.py)
    modpack verify deploy.so --key key.pub.pem # seal, payloads, signatures; exit 0 if all hold
    modpack extract deploy.so out/             # payloads, code, arrays (.npy), manifest.json
    modpack preflight deploy.so --device cuda:sm_90  # which code that GPU would get, and why
    modpack slim deploy.so -o fleet.so --keep sm_90  # only the code those devices need
    modpack push deploy.so oci://HOST/REPO:TAG       # to an OCI registry (cli/oci.py)
    modpack pull oci://HOST/REPO:TAG -o DIR          # into the local store (and DIR)
    modpack cache list                               # what modpack keeps (cli/cache.py)
    modpack cache prune --max-size 512M              # least recently used first
    modpack selftest deploy.so --device opencl:0     # run the self-tests it carries here

and, for C and C++ programs built against this install (modpack/sdk.py):

    modpack --cmake-dir      # the CMake package: cmake -Dmodpack_DIR="$(modpack --cmake-dir)"
    modpack --includes       # -I<headers>: modpack.h, modpack.hpp, dlpack/dlpack.h
    modpack --libs           # -L<lib> -Wl,-rpath,<lib> -lmodpack_runtime
    modpack --pkgconfig-dir  # for PKG_CONFIG_PATH (modpack.pc)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import __version__
from ..compat import zip_strict
from ..errors import ModpackError
from ..reports import PreflightReport
from ..tools.json_schema import dumps
from .cache import add_cache
from .oci import add_pull, add_push
from .selftest import add_selftest
from .slim import add_slim
from .trust import add_sign, add_verify

__all__ = ["build_parser", "format_inspection", "format_preflight", "main"]

_Subparsers = Any  # argparse's _SubParsersAction is private


# ---- inspect ------------------------------------------------------------------------------


def _add_inspect(subparsers: _Subparsers) -> None:
    p = subparsers.add_parser(
        "inspect",
        help="describe a library's blob, module tree and host functions (without loading it)",
        description=(
            "Describe a deployable library made by export_library: the __dev_mblob header, "
            "every module with its payload and import edges, the import tree and the exported "
            "host functions. The file is read, never loaded: no code from it runs. The blob is "
            "fully validated, payload checksums included. The exit status is 1 when the file "
            "is damaged (its seal does not match) or was not made by modpack, as loading it "
            "would fail anywhere; 0 for a sound library, including one built for another "
            "machine (its machine is shown) or one whose kind has no loader in this process "
            "(each said on stderr)."
        ),
    )
    p.add_argument("library", help="path to the shared library (e.g. deploy.so) or weight file")
    p.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    p.set_defaults(run=_run_inspect)


def _run_inspect(args: argparse.Namespace) -> int:
    from ..tools.inspection import inspect_library
    from ..tools.verdict import NOT_DAMAGE, outcome

    report = inspect_library(args.library)
    if args.json:
        sys.stdout.write(dumps(report))
    else:
        sys.stdout.write(format_inspection(report))
    loads = report.get("loads")
    if loads is not None and not loads["ok"]:  # one verdict: the loader refuses it, so inspect
        sys.stdout.flush()
        if loads["stage"] in NOT_DAMAGE:  # not the file's fault: said, and exit 0
            sys.stderr.write(f"modpack inspect: note: {args.library} "
                             f"{outcome(loads['stage'])}: {loads['message']}\n")
            return 0
        return _fail(args.command,
                     f"{args.library} {outcome(loads['stage'])}: {loads['message']}")
    return 0


def format_inspection(report: dict[str, Any]) -> str:
    """The human-readable form of an :func:`~modpack.tools.inspection.inspect_library` report."""
    if report.get("kind") == "weight file":
        from ..tools.weight_reports import weight_file_report_lines

        return "\n".join(weight_file_report_lines(report)) + "\n"
    out: list[str] = [report["path"]]
    blob = report["blob"]

    def field(name: str, value: str) -> None:
        out.append(f"  {name:<18} {value}")

    if report.get("content_digest"):
        field("content digest", report["content_digest"])
    for key_id in report.get("signed_by", []):
        field("signed by", f"key {key_id[:16]} (check: modpack verify --key PUB.pem)")
    if report.get("machine"):  # the machine it was built for
        here = platform.machine()
        field("machine", report["machine"] + ("" if report["machine"] == here
                                              else f" (not this machine, which is {here})"))

    if report.get("producer") == "tvm":
        field("producer", f"TVM, blob layout of {report['format_version']}")
        field("blob", f"{blob['size']} bytes, symbol {blob['symbol']} in section "
                      f"{blob['section']} at file offset {blob['file_offset']}")
        if report.get("note"):
            field("note", report["note"])
    elif report.get("producer", "modpack") is None:
        field("producer", "not modpack: no seal, no blob, no symbol of modpack's (below)")
    elif blob is None and not (report.get("loads") or {"ok": True})["ok"]:
        field("format version", "- (no blob read)")
        field("blob", "none read: the file would not load (below)")
    elif blob is None:
        field("format version", "- (no blob)")
        field("blob", "none: no __dev_mblob symbol, so this is host code only")
    else:
        field("format version", report["format_version"])
        field("writer version", f"modpack {report['writer_version']}")
        field("blob", f"{blob['size']} bytes, symbol {blob['symbol']} in section "
                      f"{blob['section']} at file offset {blob['file_offset']} "
                      f"(0x{blob['file_offset']:x})")
        field("index", f"{blob['index_size']} bytes, checksum {blob['index_checksum']}")
        loads = report.get("loads")
        checked = ("verified" if loads is None or loads["ok"]
                   or loads["stage"] in ("code", "loaders", "machine")
                   else "not verified: the file would not load")
        field("flags", "payload checksums: "
                       + (f"yes ({checked})" if blob["payload_checksums"] else "no"))

    seal = report.get("seal") or {"state": "absent", "message": None}
    if report.get("producer") == "tvm" and seal["state"] == "absent":
        field("seal", "none (TVM writes none)")
    elif seal["state"] == "valid":
        field("seal", "valid" + (f" (XXH3-128 {seal['digest']})" if seal.get("digest") else ""))
    else:
        field("seal", f"{seal['state'].upper()}: {seal['message']}")
    if report.get("note") and report.get("producer") != "tvm":
        field("note", report["note"])

    modules = report["modules"]
    out += ["", f"modules ({len(modules)})"]
    header = ("index", "type_key", "offset", "size", "checksum", "children", "parents")
    rows = [
        (
            str(m["index"]),
            _type_key(m["type_key"]),
            str(m["offset"]),
            str(m["size"]),
            m["checksum"] or "-",
            _indices(m["children"]),
            _indices(m["parents"]),
        )
        for m in modules
    ]
    out += _table(header, rows, right=(0, 2, 3))

    out += ["", "import tree"]
    out += ["  " + line for line in _tree(modules)]

    for m in modules:
        contents = m.get("contents")
        if contents:
            named = f", named {contents['name']!r}" if "name" in contents else ""
            out += ["", f"module {m['index']} ({m['type_key']}{named})"]
            if m.get("code"):  # a device module: its code as stored and once decoded
                code = m["code"]
                how = "compressed (zstd code frames)" if code["compressed"] else (
                    "code frames, none compressed" if m.get("code_frames") else "uncompressed")
                out.append(f"  code: {code['stored_bytes']} bytes stored, {code['raw_bytes']} "
                           f"bytes raw, {how}")
            out += ["  " + line for line in _contents(contents)]

    functions = report["functions"]
    out += ["", f"exported host functions ({len(functions)})"]
    signatures = report.get("signatures", {})
    out += [f"  {name}({signatures[name]})" if name in signatures else f"  {name}"
            for name in functions] or ["  (none)"]
    out += _extras_lines(report)
    return "\n".join(out) + "\n"


def _extras_lines(report: dict[str, Any]) -> list[str]:
    """The metadata (one line per key, its value as JSON) and one line per self-test."""
    out: list[str] = []
    metadata = report.get("metadata")
    if metadata is not None:
        out += ["", "metadata"]
        out += [f"  {key}: {json.dumps(value, sort_keys=True, ensure_ascii=False)}"
                for key, value in sorted(metadata.items())]
    tests = report.get("selftests")
    if tests is not None:
        out += ["", f"self-tests ({len(tests)}; run them: modpack selftest {report['path']})"]
        for t in tests:
            args = ", ".join(f"{a['dtype']}{a['shape']}" if isinstance(a, dict)
                             else json.dumps(a) for a in t["args"])
            checks = [f"argument {k}" for k in t["checks"]]
            if "returns" in t:
                checks.append(f"returns {json.dumps(t['returns'])}")
            out.append(f"  {t['name']}: {t['function']}({args}) on {t['device']}, checks "
                       f"{', '.join(checks)}, rtol {t['rtol']:g}, atol {t['atol']:g}")
    return out


def _contents(contents: dict[str, Any]) -> list[str]:
    """One line per fact a module's loader reported."""
    lines = []
    if "error" in contents:
        lines.append(f"cannot describe: {contents['error']}")
    if "source_bytes" in contents:  # an OpenCL module: its source and how it is built
        options = contents.get("build_options") or "(none)"
        lines.append(f"source: {contents['source_bytes']} bytes"
                     f"{_stored(contents.get('source_code'))}, build options: {options}")
    if "file" in contents:  # a weights module: the weight file it refers to
        lines.append(f"weight file {contents['file']} ({contents.get('digest', '?')[:23]}...)")
    for a in contents.get("arrays", []):
        lines.append(f"array {a['name']}: {a['dtype']}{a['shape']}")
    for k in contents.get("kernels", []):
        launch = ", ".join(k.get("launch", []))
        fixed = ", ".join(f"{tag}={value}" for tag, value in k.get("fixed", {}).items())
        line = f"kernel {k['name']}({', '.join(k['args'])})  launch: {launch or '-'}"
        line += f"  fixed: {fixed}" if fixed else ""
        line += f"  symbol: {k['symbol']}" if "symbol" in k else ""
        lines.append(line)
        if "demangled" in k:
            lines.append(f"  = {k['demangled']}")
    if "format" in contents:  # a TVM device module
        lines.append(f"code: {contents['format']}, {contents['code_bytes']} bytes")
    names = {k["name"] for k in contents.get("kernels", [])}
    for f in contents.get("functions", []):
        if isinstance(f, dict):  # TVM's function info
            launch = ", ".join(f["launch_tags"]) or "-"
            lines.append(f"function {f['name']}({', '.join(f['arg_types'])})  launch: {launch}")
        elif f not in names:
            lines.append(f"function {f}")
    for v in contents.get("variants", []):
        holds = f" ({', '.join(v['kernels'])})" if "kernels" in v else ""
        lines.append(f"variant {v.get('arch')}: {v.get('kind')}, {v.get('size')} bytes"
                     f"{_stored(v)}{holds}")
    for i, shader in enumerate(contents.get("shaders", [])):  # a Vulkan module's SPIR-V
        needs = ""
        if "vulkan" in shader:  # payload version 2: what it needs of a device
            extra = [str(c) for c in shader["capabilities"] if c not in ("Shader", "Matrix")]
            needs = (f", SPIR-V {shader['spirv']} for Vulkan {shader['vulkan']}"
                     + (f" with {', '.join(extra)}" if extra else ""))
        lines.append(f"shader {i}: SPIR-V, {shader['size']} bytes{_stored(shader)}{needs}")
    for face in contents.get("interfaces", []):
        size = "x".join(map(str, face["workgroup_size"]))
        lines.append(f"kernel {face['kernel']}: shader {face['shader']} entry point "
                     f"{face['entry_point']}, workgroup size {size}, "
                     f"{face['push_constant_bytes']} bytes of push constants")
        constants = [(f"{c['name']} = {c['value']} ({c['type']}, SpecId {c['id']}"
                      if c["name"] else f"SpecId {c['id']} = {c['value']} ({c['type']}")
                     + (", default)" if c["default"] else ")")
                     for c in face.get("specialization", [])]
        if constants:
            lines.append(f"  specialization: {', '.join(constants)}")
    for b in contents.get("binaries", []):
        lines.append(f"prebuilt binary for {b['device']}: {b['size']} bytes{_stored(b)}")
    return lines


def _stored(piece: dict[str, Any] | None) -> str:
    """A piece of device code's sizes as stored and once decoded (code frames), or nothing for
    a piece the runtime did not size (an older kind's description)."""
    if not piece or "stored_bytes" not in piece or "raw_bytes" not in piece:
        return ""
    encoding = piece.get("encoding", "raw")
    how = {"raw": "no frame", "stored": "framed, uncompressed"}.get(encoding, encoding)
    return f" (stored {piece['stored_bytes']} bytes, raw {piece['raw_bytes']} bytes, {how})"


def _type_key(key: str) -> str:
    return f"{key} (host code)" if key == "_lib" else key


def _indices(values: list[int]) -> str:
    return ", ".join(map(str, values)) if values else "-"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]],
           right: Sequence[int]) -> list[str]:
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        parts = [cell.rjust(w) if c in right else cell.ljust(w)
                 for c, (cell, w) in enumerate(zip_strict(cells, widths))]
        return ("  " + "  ".join(parts)).rstrip()

    return [line(header)] + [line(r) for r in rows]


def _tree(modules: list[dict[str, Any]]) -> list[str]:
    """The import tree from the root, one module a line. A module with several parents is shown
    under each and marked shared; its imports are drawn the first time only. Iterative, so a
    deep chain cannot exhaust Python's recursion limit."""

    def label(i: int) -> str:
        m = modules[i]
        text = f"[{i}] {_type_key(m['type_key'])}"
        if m["type_key"] != "_lib" and m["type_key"] != "library":
            text += f", {m['size']} bytes"
        if len(m["parents"]) > 1:
            text += ", shared"
        return text

    lines = [label(0)]
    expanded = {0}
    # (module, prefix for its line, is the last child of its parent)
    stack = [(c, "", k == len(modules[0]["children"]) - 1)
             for k, c in reversed(list(enumerate(modules[0]["children"])))]
    while stack:
        i, prefix, last = stack.pop()
        text = label(i)
        children = modules[i]["children"]
        repeat = i in expanded
        if repeat and children:
            text += f" (imports shown above: {_indices(children)})"
        lines.append(prefix + ("`-- " if last else "|-- ") + text)
        if repeat:
            continue
        expanded.add(i)
        inner = prefix + ("    " if last else "|   ")
        stack += [(c, inner, k == len(children) - 1)
                  for k, c in reversed(list(enumerate(children)))]
    return lines


# ---- dispatch -----------------------------------------------------------------------------

# ---- extract ------------------------------------------------------------------------------


def _add_extract(subparsers: _Subparsers) -> None:
    p = subparsers.add_parser(
        "extract",
        help="write a library's payloads, code, arrays and manifest to a folder (no code runs)",
        description=(
            "Write the contents of a library (modpack's .so, .tar or system-library .o, or a "
            "TVM library) into DIR: each module's payload (modules/), the code of device "
            "modules whose layout is known, const arrays as .npy (arrays/), and manifest.json "
            "with the import tree, type keys, kernel records and arrays' metadata. The file is "
            "validated as inspect validates it, and never loaded."
        ),
    )
    p.add_argument("library", help="the library (e.g. deploy.so)")
    p.add_argument("directory", help="a new (or empty) folder to write into")
    p.set_defaults(run=_run_extract)


def _run_extract(args: argparse.Namespace) -> int:
    from ..tools.extraction import extract_library

    manifest = extract_library(args.library, args.directory)
    if manifest.get("kind") == "weight file":
        print(f"extracted {args.library} (weight file): {len(manifest['arrays'])} arrays as "
              f".npy, manifest.json in {args.directory}")
        return 0
    files = sum(1 for _ in os.scandir(os.path.join(args.directory, "modules")))
    arrays = sum(len(m.get("arrays", [])) for m in manifest["modules"])
    print(f"extracted {args.library} ({manifest['producer']}): {len(manifest['modules'])} "
          f"modules, {files} payload and code files, {arrays} arrays, manifest.json in "
          f"{args.directory}")
    return 0


# ---- preflight ----------------------------------------------------------------------------


def _add_preflight(subparsers: _Subparsers) -> None:
    p = subparsers.add_parser(
        "preflight",
        help="say which code a device would get from each module (reads only the index)",
        description=(
            "Say, per module of a library, which of its code a device would get and why, or "
            "why none fits: what the file has against what the device is. Only the library's "
            "seal, its blob index and the variant table at the head of each device module's "
            "payload are read (never code, but with --device host the code a device would "
            "compile, hashed to say whether the kernel cache holds its build: hit or miss), "
            "and nothing runs. The choice is the loader's. Exit "
            "status 0 when every module has code for the device, 1 when one has none, 2 for a "
            "DEVICE that names no device."
        ),
    )
    p.add_argument("library", help="the library (e.g. deploy.so)")
    p.add_argument("--device", required=True,
                   help="cuda:sm_XY (e.g. cuda:sm_90), rocm:TARGET_ID (e.g. rocm:gfx90a:xnack-), "
                        "opencl, vulkan (any), vulkan:N (this machine's Vulkan device N), or "
                        "host (this machine's devices)")
    p.add_argument("--json", action="store_true", help="print the answer as JSON on stdout")
    p.set_defaults(run=_run_preflight)


def _run_preflight(args: argparse.Namespace) -> int:
    from ..errors import ArgumentError
    from ..tools.preflight import preflight

    try:
        report = preflight(args.library, args.device)
    except ArgumentError as exc:
        print(f"modpack preflight: error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        sys.stdout.write(dumps(report))
    else:
        sys.stdout.write(format_preflight(report))
    return 0 if report["fits"] else 1


def format_preflight(report: PreflightReport) -> str:
    """The human-readable form of a :func:`~modpack.tools.preflight.preflight` answer."""
    verdict = "fits" if report["fits"] else "DOES NOT FIT"
    out = [f"{report['path']} on {report['device']}: {verdict}: {report['reason']}"]
    for d in report["unavailable"]:
        out.append(f"  no {d['type']} device here: {d['message']}")
    for m in report["modules"]:
        head = f"  module {m['index']} ({m['type_key']})"
        if not m["answers"]:
            out.append(f"{head}: {m['status']}: {m['reason']}")
            continue
        for a in m["answers"]:
            where = f"{head} on {a['device']}"
            if "kernels" in a:
                for k in a["kernels"]:
                    out.append(f"{where}, kernel {k['kernel']}: " + _answer_line(k))
                if a.get("kernel_cache"):
                    cache = a["kernel_cache"]
                    out.append(f"{where}: kernel cache: {cache['state']}: {cache['detail']}")
            else:
                out.append(f"{where}: " + _answer_line(a))
    read = report["read"]
    out.append(f"  (read {read['bytes']} bytes of the file in {read['reads']} reads)")
    return "\n".join(out) + "\n"


def _answer_line(a: Mapping[str, Any]) -> str:
    if not a["fits"]:
        has = ", ".join(v["variant"] if isinstance(v, dict) else v for v in a.get("variants", []))
        return f"NO CODE: {a['reason']}" + (f" (the file has: {has})" if has else "")
    line = f"{a['variant']} ({a['kind']}): {a['reason']}"
    if a.get("fallbacks"):
        line += f"; then {', '.join(a['fallbacks'])}"
    cache = a.get("kernel_cache")  # a device of this machine (--device host) only
    if cache:
        line += f" [kernel cache: {cache['state']}: {cache['detail']}]"
    return line


_COMMANDS: list[Callable[[_Subparsers], None]] = [_add_inspect, add_sign, add_verify,
                                                   _add_extract, _add_preflight, add_slim,
                                                   add_push, add_pull, add_cache,
                                                   add_selftest]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="modpack",
        description="Tools for modpack's deployable libraries.",
    )
    parser.add_argument("--version", action="version", version=f"modpack {__version__}")
    sdk = parser.add_argument_group(
        "the C/C++ SDK", "where this install's runtime library, headers, CMake package and "
        "pkg-config file are, for programs built against it; each prints one line and exits")
    for flag, text in _SDK_QUERIES.items():
        sdk.add_argument(flag, action="store_const", const=flag, dest="sdk_query", help=text)
    subparsers = parser.add_subparsers(dest="command", metavar="<command>")
    for add in _COMMANDS:
        add(subparsers)
    return parser


_SDK_QUERIES = {
    "--cmake-dir": "the folder of modpackConfig.cmake (cmake -Dmodpack_DIR=...)",
    "--includes": "the compiler flags for the headers (-I...)",
    "--libs": "the linker flags for the shared runtime library, with an rpath to it",
    "--pkgconfig-dir": "the folder of modpack.pc (PKG_CONFIG_PATH)",
}


def _sdk_answer(query: str) -> str:
    from .. import sdk

    if query == "--cmake-dir":
        return str(sdk.cmake_dir())
    if query == "--includes":
        return sdk.quoted(sdk.compile_flags())
    if query == "--libs":
        return sdk.quoted(sdk.link_flags())
    return str(sdk.pkgconfig_dir())


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "sdk_query", None) is not None:
        if getattr(args, "command", None) is not None:
            parser.error(f"{args.sdk_query} takes no command")
        try:
            print(_sdk_answer(args.sdk_query))
        except ModpackError as exc:
            return _fail(args.sdk_query, str(exc))
        return 0
    if getattr(args, "run", None) is None:
        parser.print_help(sys.stderr)
        return 2
    _progress_lines()
    try:
        status: int = args.run(args)
        return status
    except ModpackError as exc:
        return _fail(args.command, str(exc))
    except BrokenPipeError:
        # The reader went away (e.g. `| head`): stop quietly, without a second error at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except OSError as exc:
        where = f"{exc.filename}: " if exc.filename else ""
        return _fail(args.command, f"{where}{exc.strerror or exc}")
    except KeyboardInterrupt:
        return 130


class _Stderr(logging.Handler):
    """Records as lines on whatever sys.stderr is when they come."""

    def emit(self, record: logging.LogRecord) -> None:
        sys.stderr.write(self.format(record) + "\n")


def _progress_lines() -> None:
    """The progress of long operations (modpack.progress) as lines on stderr, where no bar is
    drawn: CI logs get them (a terminal gets bars)."""
    logger = logging.getLogger("modpack.progress")
    if not any(isinstance(h, _Stderr) for h in logger.handlers):
        logger.addHandler(_Stderr())
        if logger.level == logging.NOTSET:
            logger.setLevel(logging.INFO)


def _fail(command: str, message: str) -> int:
    print(f"modpack {command}: error: {message}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
