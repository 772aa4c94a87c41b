"""The cuda kind's kernel records: its launch tags (from the runtime) and records given by hand
(``functions=``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ...errors import ArgumentError
from ..kernel_info import KernelInfo, kernel_infos, launch_tags

__all__ = ["KIND_LAUNCH_TAGS", "LAUNCH_TAGS", "SHARED_MEMORY_TAG", "check_launch_tags",
           "records"]

# grid x, y, z ("blockIdx"), block x, y, z ("threadIdx"), then the optional dynamic shared
# memory, in the runtime's launch-slot order.
KIND_LAUNCH_TAGS: tuple[str, ...] = launch_tags("cuda")
*_GRID_AND_BLOCK, SHARED_MEMORY_TAG = KIND_LAUNCH_TAGS
LAUNCH_TAGS: tuple[str, ...] = tuple(_GRID_AND_BLOCK)


def records(functions: Mapping[str, Any] | Iterable[KernelInfo]) -> list[KernelInfo]:
    infos = kernel_infos(functions, LAUNCH_TAGS)
    for info in infos:
        check_launch_tags(info)
    return infos


def check_launch_tags(info: KernelInfo) -> None:
    """The kind's tags, each once (KernelInfo.check_tags), and the dynamic shared memory, when
    passed, last: calls read as (args..., grid, block, shared bytes)."""
    info.check_tags(KIND_LAUNCH_TAGS)
    tags = list(info.launch_tags)
    if SHARED_MEMORY_TAG in tags and tags[-1] != SHARED_MEMORY_TAG:
        raise ArgumentError(
            f"kernel {info.name}: {SHARED_MEMORY_TAG!r} must be the last launch tag")
