"""export_library: compile the host modules, link one library, write the blob into it, seal it,
and put it in place atomically.

A ``.so`` is made in one of two ways:

- *placed* (64-bit little-endian targets, the default): the linker links the host code with the
  anchor object, a placeholder; modpack then writes the blob once, straight into the final
  file, as a read-only segment of its own (:mod:`modpack.format.image`). No linker reads or
  writes payload bytes and no intermediate file holds them, so export runs at the speed of one
  sequential write;
- *linked*: a blob object holding the whole blob goes through the linker (a custom packer,
  targets the placement does not handle).

Either way the library ends with its seal (:mod:`modpack.format.seal`). A ``.tar`` keeps the
objects for a later link, the blob object among them, with a seal over every member
(:mod:`modpack.format.tar_seal`).

The steps, one module each: :mod:`.plan` checks the arguments and decides what to do, before any
work; :mod:`.host_code` compiles the host modules; :mod:`.finish` makes the output in its form
(with the blob from :mod:`.blob_object`); :mod:`.disk_full` names a file system that filled up.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..extras import require_extra
from ..files.disk_full import full_disk_reported
from ..files.scratch import new_workspace
from ..modules.tree import Node
from ..selftests.spec import SelfTest
from .blob_object import PREPARE_IN_MEMORY_BELOW, prepared_blob
from .finish import finish_linked, finish_placed, finish_system_lib, finish_tar
from .host_code import compile_host_code, host_linker
from .plan import ExportPlan, plan_export
from .selftest_functions import check_selftest_functions
from .weights import write_weights

__all__ = ["export_library"]


def export_library(
    root: Node,
    path: str | os.PathLike[str],
    fcompile: Callable[..., Any] | None = None,
    workspace_dir: str | os.PathLike[str] | None = None,
    *,
    options: list[str] | None = None,
    cc: str | None = None,
    cxx: str | None = None,
    packer: str = "auto",
    fpack_imports: Callable[[Path, Path], Path] | None = None,
    payload_alignment: int | None = None,
    compress_code: bool | int = False,
    system_lib: str | None = None,
    target: str | None = None,
    weights: str | os.PathLike[str] | None = None,
    metadata: Mapping[str, Any] | None = None,
    selftests: Sequence[SelfTest | Mapping[str, Any]] | None = None,
) -> Path:
    """See :meth:`modpack.Module.export_library`."""
    require_extra("build", "export_library")
    plan = plan_export(root, path, fcompile, options=options, cc=cc, cxx=cxx, packer=packer,
                       fpack_imports=fpack_imports, payload_alignment=payload_alignment,
                       compress_code=compress_code, system_lib=system_lib, target=target,
                       weights=weights, metadata=metadata, selftests=selftests)
    try:
        with _workspace(workspace_dir) as workspace, full_disk_reported(plan.output, workspace):
            objects, prepared = _compile_host_code(plan, workspace)
            check_selftest_functions(plan.selftests, plan.serializer.plan.nodes, objects)
            linker = host_linker(plan)
            if plan.weights is not None:  # after the compilers, which fail more often
                write_weights(plan.weights, plan.serializer.plan.nodes, plan.alignment)
            if plan.system_lib is not None:
                finish_system_lib(plan, objects, workspace)
            elif plan.placed:
                finish_placed(plan, objects, linker, workspace, prepared)
            elif plan.as_tar:
                finish_tar(plan, objects, linker, workspace)
            else:
                finish_linked(plan, objects, linker, workspace)
    finally:
        if plan.weights is not None:
            plan.weights.discard()  # a no-op once published with the library
    return plan.output


def _compile_host_code(plan: ExportPlan, workspace: Path) -> tuple[list[Path], memoryview | None]:
    """The host code's objects, and the blob when it was written to memory meanwhile: for a
    small placed blob, the compilers (processes of their own) run while this thread writes the
    blob, so the two take the machine's cores side by side. A compiler's error comes first, as
    when the steps run one after the other."""
    side_by_side = (plan.placed and plan.weights is None
                    and plan.payload_bytes < PREPARE_IN_MEMORY_BELOW
                    and all(m.type_key != "llvm" for m in plan.host_modules))  # LLVM: in-process
    if not side_by_side:
        return compile_host_code(plan, workspace), None
    with ThreadPoolExecutor(1, thread_name_prefix="modpack-compile") as pool:
        compiling = pool.submit(compile_host_code, plan, workspace)
        try:
            prepared = prepared_blob(plan)
        except BaseException:
            compiling.result()  # its error first, if it has one
            raise
        return compiling.result(), prepared


@contextmanager
def _workspace(workspace_dir: str | os.PathLike[str] | None) -> Iterator[Path]:
    """The folder for intermediate files: |workspace_dir|, kept; else a new one named for this
    process (never /dev/shm, which is memory until reboot when an export dies), removed after."""
    if workspace_dir is not None:
        workspace = Path(workspace_dir)
        workspace.mkdir(parents=True, exist_ok=True)
        yield workspace
        return
    workspace = new_workspace()
    try:
        yield workspace
    finally:
        shutil.rmtree(workspace, ignore_errors=True)
