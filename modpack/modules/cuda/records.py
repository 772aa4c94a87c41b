"""The cuda kind's kernel records: its launch tags (from the runtime) and records given by hand
(``functions=``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..kernel_info import KernelInfo, kernel_infos, launch_tags

__all__ = ["LAUNCH_TAGS", "SHARED_MEMORY_TAG", "check_launch_tags", "records"]

# grid x, y, z ("blockIdx"), block x, y, z ("threadIdx"), then the optional dynamic shared
# memory, in the runtime's launch-slot order.
*_GRID_AND_BLOCK, SHARED_MEMORY_TAG = launch_tags("cuda")
LAUNCH_TAGS: tuple[str, ...] = tuple(_GRID_AND_BLOCK)


def records(functions: Mapping[str, Any] | Iterable[KernelInfo]) -> list[KernelInfo]:
    infos = kernel_infos(functions, LAUNCH_TAGS)
    for info in infos:
        check_launch_tags(info)
    return infos


def check_launch_tags(info: KernelInfo) -> None:
    tags = list(info.launch_tags)
    allowed = (*LAUNCH_TAGS, SHARED_MEMORY_TAG)
    bad = [t for t in tags if t not in allowed]
    if bad or len(set(tags)) != len(tags):
        raise ValueError(f"kernel {info.name}: launch tags {tags} must be distinct names from "
                         f"{list(allowed)}")
    if SHARED_MEMORY_TAG in tags and tags[-1] != SHARED_MEMORY_TAG:
        raise ValueError(f"kernel {info.name}: {SHARED_MEMORY_TAG!r} must be the last launch tag")
