"""Adapters over shared base weights (load_module(..., overlays=[...]), swap_overlays;
mp_load_options_t.overlays, mp_module_swap_overlays): weight files whose arrays host code finds
before the tree's own, adding arrays or replacing ones of the same dtype and shape, the base
untouched and shared; swapped atomically for callers; signed like weight files."""

from __future__ import annotations

import gc
import threading
from pathlib import Path

import numpy as np
import pytest
from test_signing import write_key

import modpack
from modpack.format.signatures import sign_library

N = 1 << 14
HOST = r"""
#include "modpack/backend.h"
static double sum_of(const char* name) {
  const DLTensor* a;
  if (mp_backend_get_array(name, &a) != MP_OK) return -1;
  double sum = 0;
  for (int64_t i = 0; i < a->shape[0]; ++i) sum += ((const double*)a->data)[i];
  return sum;
}
static double base_sum(void) { return sum_of("b"); }
MP_EXPORT_FUNC0(base_sum, double)
static double extra_sum(void) { return sum_of("lora_a"); }
MP_EXPORT_FUNC0(extra_sum, double)
/* b read twice with work between: a call sees one version of the overlays throughout. */
static int64_t consistent(void) {
  double first = sum_of("b"), spin = 0;
  for (int i = 0; i < 200000; ++i) spin += i * 1e-9;
  double second = sum_of("b");
  return first == second && spin >= 0 ? (int64_t)first : -1;
}
MP_EXPORT_FUNC0(consistent, int64_t)
"""


@pytest.fixture
def base(tmp_path) -> Path:
    weights = modpack.save_weights({"w": np.ones(N), "b": np.full(N, 1.0)},
                                   tmp_path / "base.mpw")
    host = modpack.csource_module(HOST)
    host.import_module(modpack.weights_module(weights))
    return host.export_library(tmp_path / "model.so")


def adapter(folder: Path, name: str, value: float, **extra: np.ndarray) -> Path:
    return modpack.save_weights({"b": np.full(N, value), **extra}, folder / name)


def test_an_overlay_replaces_and_adds_arrays_over_the_shared_base(base, tmp_path):
    """Host code reads the adapter's b and its new lora_a; the base file is untouched and what
    the tree's own module hands out; without overlays the same library reads its base."""
    a = adapter(tmp_path, "a.mpw", 2.0, lora_a=np.full(N, 3.0))
    root = modpack.load_module(base, overlays=[a])
    assert root["base_sum"]() == 2.0 * N and root["extra_sum"]() == 3.0 * N
    assert root.imported_modules[0].arrays["b"][0] == 1.0  # the base, as its module has it
    del root
    gc.collect()
    plain = modpack.load_module(base)
    assert plain["base_sum"]() == 1.0 * N
    with pytest.raises(modpack.NotFoundError, match="no array named 'lora_a'"):
        plain["extra_sum"]()


def test_a_later_overlay_wins_and_swaps_are_whole(base, tmp_path):
    a, b = adapter(tmp_path, "a.mpw", 2.0), adapter(tmp_path, "b.mpw", 5.0)
    root = modpack.load_module(base, overlays=[a, b])
    assert root["base_sum"]() == 5.0 * N
    root.swap_overlays([a])
    assert root["base_sum"]() == 2.0 * N
    root.swap_overlays([])
    assert root["base_sum"]() == 1.0 * N
    with pytest.raises(modpack.MissingFileError, match="no such overlay"):
        root.swap_overlays([tmp_path / "absent.mpw"])
    with pytest.raises(modpack.ArgumentError, match="a list of weight files' paths"):
        root.swap_overlays(a)  # type: ignore[arg-type]


def test_a_replacement_of_another_shape_is_refused_naming_it(base, tmp_path):
    wrong = modpack.save_weights({"b": np.ones(N + 1)}, tmp_path / "wrong.mpw")
    with pytest.raises(modpack.WeightsMismatchError,
                       match=r"overlay .*wrong\.mpw.*array 'b' is float64\[16385\] in .*wrong\.mpw"
                             r".*but float64\[16384\] in the tree it overlays"):
        modpack.load_module(base, overlays=[wrong])
    root = modpack.load_module(base, overlays=[adapter(tmp_path, "a.mpw", 2.0)])
    with pytest.raises(modpack.WeightsMismatchError, match="array 'b' is float64"):
        root.swap_overlays([wrong])
    assert root["base_sum"]() == 2.0 * N  # the old ones stay


def test_a_loaded_tree_is_not_given_other_overlays_by_a_second_load(base, tmp_path):
    a = adapter(tmp_path, "a.mpw", 2.0)
    root = modpack.load_module(base, overlays=[a])
    assert modpack.load_module(base, overlays=[a]) is not None  # the same: the live tree
    with pytest.raises(modpack.ArgumentError, match="use the loaded tree's swap_overlays"):
        modpack.load_module(base, overlays=[adapter(tmp_path, "b.mpw", 3.0)])
    del root


def test_a_swap_is_atomic_for_callers(base, tmp_path):
    """Calls on other threads while overlays are swapped back and forth: each sees one version
    throughout (two reads of b agree), never a mix, never an error."""
    versions = [adapter(tmp_path, f"v{k}.mpw", float(k)) for k in (2, 3)]
    root = modpack.load_module(base, overlays=[versions[0]])
    results: list[int] = []
    stop = threading.Event()

    def call() -> None:
        while not stop.is_set():
            results.append(root["consistent"]())

    threads = [threading.Thread(target=call) for _ in range(3)]
    for t in threads:
        t.start()
    for i in range(40):
        root.swap_overlays([versions[i % 2]])
    stop.set()
    for t in threads:
        t.join()
    assert results and set(results) <= {2 * N, 3 * N}, sorted(set(results))


def test_overlays_in_a_signed_tree_carry_their_own_signature(base, tmp_path):
    key = write_key(tmp_path, "signer")
    sign_library(base, key[0])
    a = adapter(tmp_path, "a.mpw", 2.0)
    with pytest.raises(modpack.SignatureError, match=r"a\.mpw"):
        modpack.load_module(base, trusted_keys=[key[1]], overlays=[a])
    sign_library(a, key[0])
    root = modpack.load_module(base, trusted_keys=[key[1]], overlays=[a])
    assert root["base_sum"]() == 2.0 * N
