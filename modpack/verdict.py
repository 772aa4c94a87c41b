"""The one verdict on a file: would ``load_module`` take it? ``modpack inspect``, ``verify`` and
``extract`` all ask here first, so that they never call a file fine that a load refuses, nor
the reverse, and never do more work on a damaged file than a load would.

The checks are the runtime's own (``mp_library_check_file``: everything a load checks short of
running the library; the weight file reader; the ``.tar`` seal), not a second implementation.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import FormatError
from .format.signatures import is_weight_file
from .format.tar_seal import check_tar_seal
from .runtime.binding import error_from_status, ffi, lib
from .runtime.weight_files import load_options

__all__ = ["Verdict", "check_file"]

_STAGES = {lib.MP_CHECK_FILE: "file", lib.MP_CHECK_SEAL: "seal", lib.MP_CHECK_BLOB: "blob",
           lib.MP_CHECK_PAYLOADS: "payloads", lib.MP_CHECK_WEIGHT_FILES: "weight files"}


@dataclass(frozen=True)
class Verdict:
    """Whether a load would take the file; if not, the stage that refused it (``"file"``,
    ``"seal"``, ``"blob"``, ``"payloads"``, ``"weight files"``, checked in that order) and the
    load's own error."""

    ok: bool
    stage: str | None = None
    error: BaseException | None = None  # a ModpackError, or a Python loader's own exception

    @property
    def message(self) -> str | None:
        return None if self.error is None else str(self.error)

    def passed(self, stage: str) -> bool:
        """Whether the file got past |stage| (every stage before the one that failed)."""
        order = sorted(_STAGES, key=int)
        names = [_STAGES[k] for k in order]
        return self.ok or (self.stage is not None and names.index(stage) < names.index(
            self.stage))


def check_file(path: str | os.PathLike[str], *, verify_checksums: bool = True) -> Verdict:
    """The verdict on the library, ``.tar`` export or weight file at |path|, as a load with
    default options (and ``verify_checksums``) would give it; nothing of the file runs."""
    shown = os.fspath(path)
    flags = 0 if verify_checksums else lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS
    if shown.endswith(".tar"):
        try:
            check_tar_seal(shown)
        except FormatError as exc:
            return Verdict(False, "seal", exc)
        return Verdict(True)  # the members are the sealed ones: the blob is checked as read
    if is_weight_file(shown):
        out = ffi.new("mp_module_t**")
        status = lib.mp_weights_load(os.fsencode(shown), load_options(flags).pointer, out)
        if status != 0:
            return Verdict(False, "payloads", error_from_status(status))
        lib.mp_module_release(out[0])
        return Verdict(True)
    stage = ffi.new("int32_t*")
    status = lib.mp_library_check_file(os.fsencode(shown), load_options(flags).pointer, stage)
    if status != 0:
        return Verdict(False, _STAGES.get(stage[0], "file"), error_from_status(status))
    return Verdict(True)
