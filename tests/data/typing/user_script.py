"""A user's script over modpack's public API, checked with ``mypy --strict`` and run by
tests/test_typing.py: the types a user sees are the ones written here (``assert_type``)."""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from typing_extensions import assert_type

import modpack
from modpack.reports import PreflightReport, VerifyReport

HOST = r"""
#include "modpack/backend.h"
static void scale(const DLTensor* x, DLTensor* out) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return;
  const float* a = x->data; const float* k = w->data; float* b = out->data;
  for (int64_t i = 0; i < x->shape[0]; ++i) b[i] = a[i] * k[i];
}
MP_EXPORT_TYPED_VOID_FUNC(scale, "x: float32[n] cpu, out: float32[n] cpu",
                          const DLTensor*, DLTensor*)
static int64_t twice(int64_t v) { return 2 * v; }
MP_EXPORT_FUNC(twice, int64_t, int64_t)
"""


def build(folder: Path) -> Path:
    host: modpack.Module = modpack.csource_module(HOST)
    weights = modpack.const_module({"w": np.full(4, 3.0, dtype=np.float32)})
    host.import_module(weights)
    path = host.export_library(folder / "deploy.so")
    assert_type(path, Path)
    return path


def use(path: Path) -> float:
    lib = modpack.load_module(path)
    assert_type(lib, modpack.LoadedModule)
    scale = lib["scale"]
    assert_type(scale, modpack.Function)
    assert_type(lib.get_function("twice"), modpack.Function)
    x = np.arange(4, dtype=np.float32)
    out = np.empty_like(x)
    result: Any = scale(x, out)
    assert result is None
    assert lib["twice"](21) == 42
    assert_type(lib.type_key, str)
    assert_type(lib.library_path, "str | None")
    imports = lib.imported_modules
    assert_type(imports, "list[modpack.LoadedModule | modpack.Module]")
    const = imports[0]
    assert isinstance(const, modpack.LoadedModule)  # a built-in kind: loaded by the runtime
    w = const.arrays["w"]
    assert_type(w, np.ndarray)

    from_bytes = modpack.load_module_from_bytes(path.read_bytes())
    assert_type(from_bytes, modpack.LoadedModule)

    device = modpack.array(x)
    assert_type(device, modpack.Array)
    assert_type(device.shape, "tuple[int, ...]")
    assert_type(device.numpy(), np.ndarray)
    assert_type(modpack.empty((2, 3), "float32"), modpack.Array)

    report = modpack.verify_library(path)
    assert_type(report, VerifyReport)
    assert_type(report["ok"], bool)
    assert report["ok"]
    for check in report["checks"]:
        assert_type(check["ok"], "bool | None")
        assert_type(check["message"], "str | None")
    answer = modpack.preflight(path, "host")
    assert_type(answer, PreflightReport)
    assert_type(answer["fits"], bool)
    assert_type(answer["read"]["bytes"], int)
    statuses = {m["type_key"]: m["status"] for m in answer["modules"]}
    assert_type(statuses, "dict[str, str]")
    assert statuses["const"] == "no-device-code"
    assert_type(modpack.__version__, str)
    try:
        modpack.load_module(path.with_name("missing.so"))
    except modpack.MissingFileError as exc:
        assert_type(exc, modpack.MissingFileError)
    return float(out.sum())


def main() -> int:
    with tempfile.TemporaryDirectory() as folder:
        total = use(build(Path(folder)))
    print(total)
    return 0 if total == 18.0 else 1


if __name__ == "__main__":
    sys.exit(main())
