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
        target = Path(self.build_lib) / "modpack" / "include" / "modpack"
        target.mkdir(parents=True, exist_ok=True)
        for header in (ROOT / "csrc" / "include" / "modpack").glob("*.h"):
            shutil.copy2(header, target / header.name)


setup(
    cffi_modules=["modpack/runtime/build_ffi.py:ffibuilder"],
    cmdclass={"build_py": BuildPyWithHeaders},
)
