"""Reproducible exports: the same tree exported twice, in two processes with different temp
folders, working folders and times, gives byte-identical libraries, archives and system
libraries, which content-addressed caches and signatures over the whole file rely on."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import pytest

EXPORT = r"""
import sys
import numpy as np
import modpack

host = modpack.csource_module(r'''
#include "modpack/backend.h"
static double first(void) {
  const DLTensor* w;
  if (mp_backend_get_array("weights", &w) != MP_OK) return -1;
  return ((const float*)w->data)[0];
}
MP_EXPORT_FUNC0(first, double)
''')
ir = "define i64 @__mp_func_zero(i8* %s, i8* %a, i32 %n, i8* %r) {\n  ret i64 0\n}\n"
host.import_module(modpack.llvm_module(ir))
consts = modpack.const_module({"weights": np.linspace(0, 1, 4096, dtype=np.float32),
                               "bias": np.arange(7, dtype=np.int64)})
kernels = modpack.opencl_module("__kernel void k(__global float* x) { x[0] = 1.0f; }",
                                build_options="-DWG=64")
host.import_module(consts)
host.import_module(kernels)
kernels.import_module(consts)  # shared: a DAG
out = sys.argv[1]
host.export_library(out + "/deploy.so")
host.export_library(out + "/deploy.tar")
host.export_library(out + "/model.o", system_lib="model")
"""

NAMES = ("deploy.so", "deploy.tar", "model.o")


def export_in_a_fresh_process(folder, tmpdir) -> dict[str, str]:
    folder.mkdir(parents=True)
    tmpdir.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    proc = subprocess.run([sys.executable, "-c", EXPORT, str(folder)], capture_output=True,
                          text=True, env=env, cwd=tmpdir)
    assert proc.returncode == 0, proc.stderr
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in NAMES}


def test_two_exports_in_two_processes_are_byte_identical(tmp_path):
    first = export_in_a_fresh_process(tmp_path / "a", tmp_path / "tmp-one")
    time.sleep(1.1)  # a different second for anything that would record the time
    second = export_in_a_fresh_process(tmp_path / "b" / "deeper", tmp_path / "t2")
    assert first == second


@pytest.mark.parametrize("name", NAMES)
def test_the_inspect_digest_identifies_the_artifact(tmp_path, name):
    from modpack.inspection import inspect_library
    digests = export_in_a_fresh_process(tmp_path / "a", tmp_path / "tmp")
    report = inspect_library(tmp_path / "a" / name)
    assert report["content_digest"] == f"sha256:{digests[name]}"
