"""Build glue that pyproject.toml cannot express: the cffi runtime extension (modpack._rt), the
call-path extension (modpack.runtime._calls), a copy of the public C and C++ headers inside the
package (host code compiled at export time includes them), and the C SDK a wheel ships for C
and C++ programs (modpack/sdk.py): the runtime as a shared and a static library, a CMake
package and a pkg-config file, under modpack/lib/."""

import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def version() -> str:
    """The package's version: the runtime's, from the one place it is written (modpack.h)."""
    header = (ROOT / "csrc" / "include" / "modpack" / "modpack.h").read_text()
    parts = [re.search(rf"#define MP_VERSION_{part} (\d+)", header) for part in
             ("MAJOR", "MINOR", "PATCH")]
    if not all(parts):
        raise RuntimeError("cannot read MP_VERSION_* from csrc/include/modpack/modpack.h")
    return ".".join(m.group(1) for m in parts)


class BuildPyWithHeaders(build_py):
    def run(self) -> None:
        super().run()
        source = ROOT / "csrc" / "include"  # modpack/ and dlpack/
        target = Path(self.build_lib) / "modpack" / "include"
        for header in [*source.rglob("*.h"), *source.rglob("*.hpp")]:
            (target / header.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(header, target / header.relative_to(source))


def compile_in_parallel(compiler) -> None:
    """Make |compiler| compile the sources of one call at once, a process per core: the
    runtime's ~90 C files, compiled one after another, were most of an editable install's time
    (the demo's setup). Each source's compile command is unchanged (setuptools' own, run from
    threads), and the objects come back in the order of the sources, so the link is too."""
    jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    if (jobs or 1) < 2:
        return
    compile_all, compile_one = compiler.compile, compiler._compile

    def compile(*args, **kwargs):
        with ThreadPoolExecutor(jobs) as pool:
            started = []
            compiler._compile = lambda *a: started.append(pool.submit(compile_one, *a))
            try:
                objects = compile_all(*args, **kwargs)
            finally:
                compiler._compile = compile_one
            for job in started:
                job.result()  # the first failure's CompileError, as a serial build raises it
        return objects

    compiler.compile = compile


class BuildExtWithSDK(build_ext):
    """The extensions, then (except in place, for an editable install) the C SDK: the runtime
    compiled once more, as a library of its own, by the compiler the extensions use (so a wheel's
    is built the same way: zig cc for glibc 2.28 in scripts/build_wheels.py), with only the
    public API exported, as CMakeLists.txt builds it; and a CMake package and pkg-config file
    over it (cmake/wheel/). The layout is an install prefix inside the package: modpack/include
    (build_py's copy of the headers) and modpack/lib."""

    def build_extensions(self) -> None:
        compile_in_parallel(self.compiler)
        super().build_extensions()

    def run(self) -> None:
        super().run()
        if not self.inplace:
            self.build_sdk(Path(self.build_lib) / "modpack" / "lib")

    def build_sdk(self, lib: Path) -> None:
        compiler = self.compiler
        sources = sorted(p.relative_to(ROOT).as_posix()
                         for p in (ROOT / "csrc" / "src").rglob("*.c"))
        flags = ["-std=c11", "-O2", "-fPIC", "-fvisibility=hidden"]
        objects = compiler.compile(sources, output_dir=os.path.join(self.build_temp, "sdk"),
                                   include_dirs=["csrc/include", "csrc/src"],
                                   extra_postargs=flags)
        lib.mkdir(parents=True, exist_ok=True)
        # One name for linking and loading (SONAME libmodpack_runtime.so, no version suffix):
        # a wheel cannot hold the symlinks of a versioned name, and its runtime is the
        # package's own, versioned with it. Binding as CMakeLists.txt does (-Bsymbolic:
        # zig cc has no -Bsymbolic-functions; the API has no data symbols).
        compiler.link_shared_object(
            objects, "libmodpack_runtime.so", output_dir=str(lib), libraries=["dl", "pthread"],
            extra_postargs=["-Wl,-soname,libmodpack_runtime.so", "-Wl,-Bsymbolic",
                            "-Wl,-z,now", "-Wl,-z,relro", "-Wl,-z,noexecstack"])
        compiler.create_static_lib(objects, "modpack_runtime", output_dir=str(lib))
        major, minor, _ = version().split(".")
        values = {"@VERSION@": version(), "@MAJOR@": major, "@MINOR@": minor}
        templates = ROOT / "cmake" / "wheel"
        for template, target in (
                ("modpackConfig.cmake", lib / "cmake" / "modpack" / "modpackConfig.cmake"),
                ("modpackConfigVersion.cmake.in",
                 lib / "cmake" / "modpack" / "modpackConfigVersion.cmake"),
                ("modpack.pc.in", lib / "pkgconfig" / "modpack.pc")):
            text = (templates / template).read_text()
            for key, value in values.items():
                text = text.replace(key, value)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)


# The one path from Python values to the calling convention (modpack/runtime/calls.c); it uses
# the runtime through a table that modpack._rt hands over, so it links nothing itself.
CALLS = Extension(
    "modpack.runtime._calls",
    sources=["modpack/runtime/calls.c"],
    include_dirs=["csrc/include", "modpack/runtime"],
    # pycompat.h: the few 3.10 API functions calls.c uses, defined for 3.9.
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra",
                        "-include", "modpack/runtime/pycompat.h"],
)

setup(
    version=version(),
    cffi_modules=["modpack/runtime/build_ffi.py:ffibuilder"],
    ext_modules=[CALLS],
    cmdclass={"build_py": BuildPyWithHeaders, "build_ext": BuildExtWithSDK},
)
