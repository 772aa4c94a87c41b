"""Build glue that pyproject.toml cannot express: the cffi runtime extension, and a copy of the
public C headers inside the package (host code compiled at export time includes them)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class BuildPyWithHeaders(build_py):
    def run(self) -> None:
        super().run()
        source = ROOT / "csrc" / "include" / "modpack"
        target = Path(self.build_lib) / "modpack" / "include" / "modpack"
        for header in source.rglob("*.h"):
            (target / header.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(header, target / header.relative_to(source))


setup(
    cffi_modules=["modpack/runtime/build_ffi.py:ffibuilder"],
    cmdclass={"build_py": BuildPyWithHeaders},
)
