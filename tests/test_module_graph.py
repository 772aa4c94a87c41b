"""The runtime's module graph at scale: deep import chains and diamond-heavy DAGs are walked
iteratively and each module once (no stack overflow, no exponential walk), and released without
recursion."""

from __future__ import annotations

import itertools
import time

from modpack.runtime.binding import ffi, lib


def probe_modules(n: int) -> list:
    modules = []
    for _ in range(n):
        out = ffi.new("mp_module_t**")
        assert lib.modpack_probe_module(out) == 0
        modules.append(out[0])
    return modules


def test_deep_chains_neither_overflow_nor_crawl():
    n = 300_000
    chain = probe_modules(n)
    for parent, child in itertools.pairwise(chain):
        assert lib.mp_module_import(parent, child) == 0  # child has no imports yet: O(1)
    for module in chain[1:]:
        lib.mp_module_release(module)  # the chain now owns them
    out = ffi.new("DLTensor**")
    assert lib.mp_module_get_array(chain[0], b"nowhere", 1, out) == lib.MP_ERR_NOT_FOUND
    lib.mp_module_release(chain[0])  # frees 300k modules without recursion


def test_diamond_chains_are_walked_once_per_module():
    layers = 40  # 2**40 paths; each module must be visited once
    top = probe_modules(1)[0]
    current = top
    owned = [top]
    for _ in range(layers):
        left, right, bottom = probe_modules(3)
        for parent, child in ((current, left), (current, right), (left, bottom),
                              (right, bottom)):
            assert lib.mp_module_import(parent, child) == 0
        owned += [left, right, bottom]
        current = bottom
    out = ffi.new("DLTensor**")
    started = time.perf_counter()
    assert lib.mp_module_get_array(top, b"nowhere", 1, out) == lib.MP_ERR_NOT_FOUND
    assert time.perf_counter() - started < 1.0
    for module in owned:
        lib.mp_module_release(module)
