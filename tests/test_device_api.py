"""The device API for host code (modpack/backend.h): workspaces from a per-device pool, copies
between host and device, and a const module's arrays on a device — uploaded once, kept for the
life of the library — run for real on OpenCL (PoCL), and on the CPU."""

from __future__ import annotations

import threading

import numpy as np
import pytest

import modpack

KERNELS = r"""
__kernel void mul(__global const float* a, __global const float* b, __global float* c, int n) {
  int i = get_global_id(0);
  if (i < n) c[i] = a[i] * b[i];
}
"""

HOST = r"""
#include "modpack/backend.h"

static void* kernel(const char* name) {
  void* k = NULL;
  mp_backend_get_function(name, &k);
  return k;
}

/* out = x * w on |device|: x and out are host arrays, w the weights, two scratch buffers. */
static void scale_by_weights(const DLTensor* x, DLTensor* out, int64_t device_type) {
  DLDevice dev = {(DLDeviceType)device_type, 0};
  int64_t n = x->shape[0];
  const DLTensor* w;
  if (mp_backend_get_array_on("w", dev, &w) != MP_OK) return;
  void *xs, *ys;
  if (mp_backend_alloc_workspace(dev, (uint64_t)n * 4, &xs) != MP_OK) return;
  if (mp_backend_alloc_workspace(dev, (uint64_t)n * 4, &ys) != MP_OK) return;
  int64_t shape[1] = {n};
  DLTensor xd = {xs, dev, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  DLTensor yd = {ys, dev, 1, {kDLFloat, 32, 1}, shape, NULL, 0};
  mp_backend_copy(x, &xd);
  mp_value_t args[] = {mp_tensor(&xd), mp_tensor((DLTensor*)w), mp_tensor(&yd), mp_int(n),
                       mp_int(n), mp_int(1), mp_int(1), mp_int(0), mp_int(0), mp_int(0)};
  mp_value_t ret;
  mp_backend_call(kernel("mul"), args, 10, &ret);
  mp_backend_copy(&yd, out);
  mp_backend_free_workspace(dev, xs);
  mp_backend_free_workspace(dev, ys);
}
MP_EXPORT_VOID_FUNC(scale_by_weights, const DLTensor*, DLTensor*, int64_t)

/* 1 when a workspace given back is handed out again (no new driver allocation). */
static int64_t workspace_is_reused(int64_t device_type) {
  DLDevice dev = {(DLDeviceType)device_type, 0};
  void *a, *b;
  if (mp_backend_alloc_workspace(dev, 1000, &a) != MP_OK) return -1;
  mp_backend_free_workspace(dev, a);
  if (mp_backend_alloc_workspace(dev, 900, &b) != MP_OK) return -1;
  mp_backend_free_workspace(dev, b);
  return a == b;
}
MP_EXPORT_FUNC(workspace_is_reused, int64_t, int64_t)

/* 1 when two lookups of the weights on a device give the same array (uploaded once). */
static int64_t weights_are_cached(int64_t device_type) {
  DLDevice dev = {(DLDeviceType)device_type, 0};
  const DLTensor *a, *b, *view;
  if (mp_backend_get_array_on("w", dev, &a) != MP_OK) return -1;
  if (mp_backend_get_array_on("w", dev, &b) != MP_OK) return -1;
  if (mp_backend_get_array("w", &view) != MP_OK) return -1;
  if (a->device.device_type != dev.device_type || a->shape[0] != view->shape[0]) return -2;
  return (a == b) + 2 * (a == view); /* 1 on a device, 3 on the CPU (the view itself) */
}
MP_EXPORT_FUNC(weights_are_cached, int64_t, int64_t)

static void free_a_stranger(int64_t device_type) {
  DLDevice dev = {(DLDeviceType)device_type, 0};
  int local;
  mp_backend_free_workspace(dev, &local);
}
MP_EXPORT_VOID_FUNC(free_a_stranger, int64_t)

static void weights_that_are_not_there(int64_t device_type) {
  DLDevice dev = {(DLDeviceType)device_type, 0};
  const DLTensor* w;
  mp_backend_get_array_on("nope", dev, &w);
}
MP_EXPORT_VOID_FUNC(weights_that_are_not_there, int64_t)
"""

OPENCL, CPU = 4, 1
WEIGHTS = np.linspace(-2.0, 2.0, 1000, dtype=np.float32)


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    if modpack.device_count("opencl") < 1:
        pytest.skip("no OpenCL device")
    host = modpack.csource_module(HOST)
    host.import_module(modpack.opencl_module(KERNELS))
    host.import_module(modpack.const_module({"w": WEIGHTS}))
    return modpack.load_module(host.export_library(tmp_path_factory.mktemp("dev") / "dev.so"))


def test_a_pipeline_with_workspaces_and_weights_on_the_device(root):
    x = np.arange(1000, dtype=np.float32)
    for _ in range(3):  # the second and third calls reuse the workspaces and the weights
        out = np.zeros_like(x)
        root["scale_by_weights"](x, out, OPENCL)
        np.testing.assert_allclose(out, x * WEIGHTS, rtol=1e-6)


def test_workspaces_come_back_from_the_pool(root):
    assert root["workspace_is_reused"](OPENCL) == 1
    assert root["workspace_is_reused"](CPU) == 1


def test_weights_are_uploaded_once_and_the_cpu_gets_the_view(root):
    assert root["weights_are_cached"](OPENCL) == 1
    assert root["weights_are_cached"](CPU) == 3


def test_the_same_pipeline_on_the_cpu_has_no_kernel_to_run(root):
    x = np.ones(1000, np.float32)
    with pytest.raises(modpack.ArgumentError,
                       match="is an array on cpu:0, not on an OpenCL device"):  # the runtime's name
        root["scale_by_weights"](x, np.zeros_like(x), CPU)


def test_mistakes_fail_the_call(root):
    with pytest.raises(modpack.ArgumentError, match="is not a workspace"):
        root["free_a_stranger"](OPENCL)
    with pytest.raises(modpack.NotFoundError, match="no array named 'nope'"):
        root["weights_that_are_not_there"](OPENCL)


def test_threads_share_the_pool_and_the_cache(root):
    x = np.arange(1000, dtype=np.float32)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            for _ in range(20):
                out = np.zeros_like(x)
                root["scale_by_weights"](x, out, OPENCL)
                np.testing.assert_allclose(out, x * WEIGHTS, rtol=1e-6)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
