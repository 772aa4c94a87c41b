"""Swapping a loaded tree's weights (swap_weights, mp_module_swap_weights): checked first, then
atomic for callers (a call sees one version throughout), device copies refreshed, the old file
released once nothing uses it."""

from __future__ import annotations

import gc
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from test_signing import write_key

import modpack
from modpack.format.signatures import sign_library

N = 1 << 16
# consistent(): reads w1, works through it, then reads w2: in version k both hold k everywhere,
# so a call that saw two versions returns a1 != a2. Encoded as a1 * 1000 + a2.
HOST = r"""
#include "modpack/backend.h"
static int64_t consistent(void) {
  const DLTensor* w1;
  const DLTensor* w2;
  if (mp_backend_get_array("w1", &w1) != MP_OK) return -1;
  const double* p = w1->data;
  double sum = 0;
  for (int64_t i = 0; i < w1->shape[0]; ++i) sum += p[i];
  if (mp_backend_get_array("w2", &w2) != MP_OK) return -1;
  double a1 = sum / (double)w1->shape[0], a2 = ((const double*)w2->data)[w2->shape[0] - 1];
  return (int64_t)(a1 * 1000 + a2);
}
MP_EXPORT_FUNC0(consistent, int64_t)
static void w1_on_device(DLTensor* out) {
  const DLTensor* w1;
  DLDevice device = out->device;
  device.device_type = kDLOpenCL;
  if (mp_backend_get_array_on("w1", device, &w1) != MP_OK) return;
  mp_backend_copy(w1, out);
}
MP_EXPORT_VOID_FUNC(w1_on_device, DLTensor*)
"""


def version(folder: Path, k: int, name: str | None = None) -> Path:
    arrays = {"w1": np.full(N, float(k)), "w2": np.full(N, float(k))}
    return modpack.save_weights(arrays, folder / (name or f"v{k}.mpw"))


@pytest.fixture
def tree(tmp_path):
    version(tmp_path, 1, "model.mpw")
    host = modpack.csource_module(HOST)
    host.import_module(modpack.weights_module(tmp_path / "model.mpw"))
    return modpack.load_module(host.export_library(tmp_path / "model.so"))


def mapped(path: Path) -> int:
    with open("/proc/self/maps") as maps:
        return sum(line.rstrip().endswith(str(path)) for line in maps)


def test_a_swap_changes_what_calls_and_views_see(tree, tmp_path):
    old_view = tree.imported_modules[0].arrays["w1"]
    assert tree["consistent"]() == 1001
    tree.swap_weights(version(tmp_path, 2))
    assert tree["consistent"]() == 2002
    assert tree.imported_modules[0].arrays["w1"][0] == 2.0
    assert old_view[0] == 1.0  # a view keeps its version
    assert mapped(tmp_path / "model.mpw") == 1
    del old_view
    gc.collect()
    assert mapped(tmp_path / "model.mpw") == 0  # released with its last view
    assert mapped(tmp_path / "v2.mpw") == 1


@pytest.mark.parametrize("case", ["another shape", "a missing array", "an extra array",
                                  "a damaged file"])
def test_a_refused_swap_keeps_the_old_weights(tree, tmp_path, case):
    path = tmp_path / "new.mpw"
    arrays = {"another shape": {"w1": np.ones(N + 1), "w2": np.ones(N)},
              "a missing array": {"w1": np.ones(N)},
              "an extra array": {"w1": np.ones(N), "w2": np.ones(N), "w3": np.ones(2)},
              "a damaged file": {"w1": np.ones(N), "w2": np.ones(N)}}[case]
    modpack.save_weights(arrays, path)
    if case == "a damaged file":
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))
    error = modpack.FormatError if case == "a damaged file" else modpack.WeightsMismatchError
    expected = {"another shape": r"array 'w1' is float64\[65537\] in '.*new.mpw', but "
                                 r"float64\[65536\] in '.*model.mpw', the weight file it would "
                                 "replace",
                "a missing array": "has no array 'w2'",
                "an extra array": "has an array 'w3', which",
                "a damaged file": "does not match its checksum"}[case]
    with pytest.raises(error, match=expected):
        tree.swap_weights(path)
    assert tree["consistent"]() == 1001


def test_calls_never_see_two_versions(tree, tmp_path):
    """Four threads call while the weights are swapped back and forth: every call sees one
    version, and both versions are seen."""
    files = [tmp_path / "model.mpw", version(tmp_path, 2)]
    consistent = tree["consistent"]
    stop = threading.Event()
    results: list[list[int]] = [[] for _ in range(4)]

    def call(out: list[int]) -> None:
        while not stop.is_set():
            out.append(consistent())

    threads = [threading.Thread(target=call, args=(r,)) for r in results]
    for t in threads:
        t.start()
    swaps, deadline = 0, time.monotonic() + 60
    try:  # swap until every thread has called through many swaps (whatever the scheduling)
        while (swaps < 60 or min(map(len, results)) < 200) and time.monotonic() < deadline:
            tree.swap_weights(files[swaps % 2 == 0])
            swaps += 1
            time.sleep(0.001)
    finally:
        stop.set()
        for t in threads:
            t.join()
    seen = {r for out in results for r in out}
    assert seen <= {1001, 2002}, sorted(seen)
    assert seen == {1001, 2002} and swaps >= 60 and min(map(len, results)) >= 200


def test_many_swaps_keep_one_mapping(tree, tmp_path):
    files = [tmp_path / "model.mpw", version(tmp_path, 2)]
    for k in range(200):
        tree.swap_weights(files[k % 2])
        assert tree["consistent"]() in (1001, 2002)
    gc.collect()
    assert mapped(files[0]) + mapped(files[1]) == 1


def test_device_copies_are_refreshed(tree, tmp_path):
    if modpack.device_count("opencl") == 0:
        pytest.skip("no OpenCL device (PoCL is installed by scripts/dev.sh)")
    out = np.zeros(N)
    tree["w1_on_device"](out)
    assert out[0] == 1.0
    tree.swap_weights(version(tmp_path, 2))
    tree["w1_on_device"](out)
    assert out[0] == 2.0


def test_a_signed_tree_takes_only_signed_weights(tmp_path):
    private, public = write_key(tmp_path, "signer")
    version(tmp_path, 1, "model.mpw")
    host = modpack.csource_module(HOST)
    host.import_module(modpack.weights_module(tmp_path / "model.mpw"))
    library = host.export_library(tmp_path / "model.so")
    sign_library(library, private)
    tree = modpack.load_module(library, trusted_keys=[public])
    unsigned = version(tmp_path, 2)
    with pytest.raises(modpack.SignatureError, match="is not signed"):
        tree.swap_weights(unsigned)
    assert tree["consistent"]() == 1001
    sign_library(unsigned, private)
    tree.swap_weights(unsigned)
    assert tree["consistent"]() == 2002


def test_swapping_names_the_file_to_replace(tmp_path):
    version(tmp_path, 1, "a.mpw")
    modpack.save_weights({"w2": np.zeros(N), "w1": np.zeros(N)}, tmp_path / "b.mpw")
    host = modpack.csource_module(HOST)
    host.import_module(modpack.weights_module(tmp_path / "a.mpw"))
    host.import_module(modpack.weights_module(tmp_path / "b.mpw"))
    tree = modpack.load_module(host.export_library(tmp_path / "two.so"))
    with pytest.raises(modpack.ArgumentError, match="refers to 2 weight files"):
        tree.swap_weights(version(tmp_path, 3))
    tree.swap_weights(tmp_path / "v3.mpw", file_name="a.mpw")
    assert tree["consistent"]() == 3003  # a.mpw comes first in import order
    with pytest.raises(modpack.NotFoundError, match=r"no weight file named 'c\.mpw'"):
        tree.swap_weights(tmp_path / "v3.mpw", file_name="c.mpw")



C_PROGRAM = r"""
#include <stdio.h>
#include <string.h>
#include "modpack/modpack.h"
static int64_t call(mp_module_t* root) {
  mp_function_t* f = NULL;
  mp_value_t ret;
  if (mp_module_get_function(root, "consistent", 0, &f) != MP_OK ||
      mp_function_call(f, NULL, 0, &ret) != MP_OK) {
    printf("error: %s\n", mp_error_message());
    return -1;
  }
  mp_function_release(f);
  return ret.v_int64;
}
int main(int argc, char** argv) {
  (void)argc;
  /* argv: library, its weight file's folder, a second weight file, a mismatching one */
  mp_load_options_t options;
  memset(&options, 0, sizeof options);
  options.struct_size = sizeof options;
  options.weights_folder = argv[2];
  mp_module_t* root = NULL;
  if (mp_module_load(argv[1], &options, &root) != MP_OK) {
    printf("load: %s\n", mp_error_message());
    return 1;
  }
  printf("%lld\n", (long long)call(root));
  if (mp_module_swap_weights(root, NULL, argv[3]) != MP_OK)
    printf("swap: %s\n", mp_error_message());
  printf("%lld\n", (long long)call(root));
  mp_status_t s = mp_module_swap_weights(root, "model.mpw", argv[4]);
  printf("%d %s\n", (int)s, mp_error_message());
  printf("%lld\n", (long long)call(root));
  mp_module_t* file = NULL;
  if (mp_weights_load(argv[3], NULL, &file) != MP_OK) printf("weights: %s\n", mp_error_message());
  const DLTensor* w2 = NULL;
  mp_module_get_array(file, "w2", 0, &w2);
  printf("%g %llu\n", ((const double*)w2->data)[0],
         (unsigned long long)mp_module_array_count(file));
  mp_module_release(file);
  mp_module_release(root);
  return 0;
}
"""


def test_from_c(tree, tmp_path, runtime_prefix):
    from conftest import build_c_program, run

    exe = build_c_program(runtime_prefix, C_PROGRAM, tmp_path / "swap")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "model.mpw").rename(elsewhere / "model.mpw")
    modpack.save_weights({"w1": np.ones(3)}, tmp_path / "bad.mpw")
    lines = run(exe, tmp_path / "model.so", elsewhere, version(tmp_path, 2),
                tmp_path / "bad.mpw").splitlines()
    assert lines[0] == "1001" and lines[1] == "2002", lines
    assert lines[2].startswith("12 array 'w1' is float64[3]"), lines  # MP_ERR_MISMATCH
    assert lines[3] == "2002" and lines[4] == "2 2", lines
