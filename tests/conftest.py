"""Shared helpers: small host programs and tree builders used across the tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import modpack

VADD_C = r"""
#include "modpack/backend.h"
static void vadd(DLTensor* a, DLTensor* b, DLTensor* c) {
  const float* x = a->data; const float* y = b->data; float* z = c->data;
  for (int64_t i = 0; i < a->shape[0]; ++i) z[i] = x[i] + y[i];
}
MP_EXPORT_VOID_FUNC(vadd, DLTensor*, DLTensor*, DLTensor*)
static int64_t add_int(int64_t a, int64_t b) { return a + b; }
MP_EXPORT_FUNC(add_int, int64_t, int64_t, int64_t)
"""


@pytest.fixture
def host() -> modpack.Module:
    return modpack.csource_module(VADD_C)


def consts(tag: int) -> modpack.Module:
    return modpack.const_module({f"c{tag}": np.full(4, tag, dtype=np.int32)})


def run_python(code: str, *args: str) -> str:
    """Run |code| in a fresh interpreter; return its stdout (fails the test on error)."""
    proc = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path
