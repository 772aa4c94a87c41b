"""Build glue that pyproject.toml cannot express: the cffi runtime extension (modpack._rt), the
call-path extension (modpack.runtime._calls), and a copy of the public C headers inside the
package (host code compiled at export time includes them)."""

import re
import shutil
from pathlib import Path

from setuptools import Extension, setup
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
        for header in source.rglob("*.h"):
            (target / header.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(header, target / header.relative_to(source))


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
    cmdclass={"build_py": BuildPyWithHeaders},
)
