"""The one verdict on a file: would ``load_module`` take it, and would its code then work?
``modpack inspect``, ``verify`` and ``extract`` all ask here first, so that they never call a
file fine that a load refuses, nor the reverse, and never do more work on a damaged file than
a load would.

The checks are the runtime's own (``mp_library_check_file``: everything a load checks short of
running the library; for a ``.tar`` export, the tar seal, the rule for its members, then
``mp_library_check_blob`` on its blob where the archive holds it; the weight file reader), not
a second implementation. One check goes further than a load: the device code stored in code
frames (``compress_code``) is decoded, every frame, as a load decodes it at the code's first
use, so that a frame that never decodes (its checksums recomputed after an edit) fails here
and not on a device hours later.
"""

from __future__ import annotations

import mmap
import os
import platform
from dataclasses import dataclass

from ..errors import FormatError, IncompatibleError, ModpackError
from ..format.code_frames import decode_frame
from ..format.layout import ENTRY_CODE_FRAMES
from ..format.payload_views import code_pieces
from ..format.signatures import is_weight_file
from ..format.tar_blob import find_tar_blob
from ..format.tar_seal import check_tar_seal
from ..runtime.binding import error_from_status, ffi, lib
from ..runtime.entries import describe_module, entry_module
from ..runtime.weight_files import load_options

__all__ = ["NOT_DAMAGE", "STAGES", "Verdict", "check_file", "damaged", "outcome"]

_STAGES = {lib.MP_CHECK_FILE: "file", lib.MP_CHECK_SEAL: "seal", lib.MP_CHECK_BLOB: "blob",
           lib.MP_CHECK_PAYLOADS: "payloads", lib.MP_CHECK_WEIGHT_FILES: "weight files",
           lib.MP_CHECK_LOADERS: "loaders", lib.MP_CHECK_MACHINE: "machine"}
# In the order they are judged; "code": the device code in frames decodes (a load decodes it
# at its first use); "machine": the file was built for another machine, judged last, once the
# rest held as on a machine of its kind.
STAGES = (*(_STAGES[k] for k in sorted(_STAGES, key=int) if _STAGES[k] != "machine"), "code",
          "machine")
# The refusals that say nothing against the file: this process has no loader for a kind of
# it, or this machine is not the one it was built for.
NOT_DAMAGE = ("loaders", "machine")


@dataclass(frozen=True)
class Verdict:
    """Whether a load would take the file and its code work; if not, the stage that refused
    it (``"file"``, ``"seal"``, ``"blob"``, ``"payloads"``, ``"weight files"``,
    ``"loaders"``, ``"code"``, ``"machine"``, judged in that order: :data:`STAGES`) and the
    load's own error (for ``"code"``, the error the first use of that code would raise).
    Two refusals say nothing against the file (:data:`NOT_DAMAGE`): ``"loaders"``, a module's
    kind has no loader registered in this process (every other check held), and a load in a
    process that registers one takes it; ``"machine"``, the file was built for another machine
    (an ``IncompatibleError`` naming both), and every other check held as on a machine of its
    kind."""

    ok: bool
    stage: str | None = None
    error: BaseException | None = None  # a ModpackError, or a Python loader's own exception

    @property
    def message(self) -> str | None:
        return None if self.error is None else str(self.error)

    def passed(self, stage: str) -> bool:
        """Whether the file got past |stage| (every stage before the one that failed)."""
        return self.ok or (self.stage is not None
                           and STAGES.index(stage) < STAGES.index(self.stage))


def outcome(stage: str | None) -> str:
    """What a load does with a file refused at |stage|, for messages: it "would not load", or
    (``"code"``) it loads and the first use of its code fails."""
    if stage == "code":
        return "would load, but the first use of its device code would fail"
    if stage == "loaders":
        return "is sound, but would not load in this process"
    if stage == "machine":
        return "is sound, but would not load on this machine"
    return "would not load"


def damaged(verdict: Verdict) -> bool:
    """Whether |verdict| refuses the file for what it is, rather than for what this process
    lacks (a loader for one of its kinds) or for the machine it was built for."""
    return not verdict.ok and verdict.stage not in NOT_DAMAGE


def check_file(path: str | os.PathLike[str], *, verify_checksums: bool = True) -> Verdict:
    """The verdict on the library, ``.tar`` export or weight file at |path|, as a load with
    default options (and ``verify_checksums``) would give it; nothing of the file runs."""
    shown = os.fspath(path)
    flags = 0 if verify_checksums else lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS
    if shown.endswith(".tar"):
        return _check_tar(shown, flags)
    if is_weight_file(shown):
        out = ffi.new("mp_module_t**")
        status = lib.mp_weights_load(os.fsencode(shown), load_options(flags).pointer, out)
        if status != 0:
            return Verdict(False, "payloads", error_from_status(status))
        lib.mp_module_release(out[0])
        return Verdict(True)
    stage = ffi.new("int32_t*")
    status = lib.mp_library_check_file(os.fsencode(shown), load_options(flags).pointer, stage)
    machine = None
    if status != 0:
        machine = Verdict(False, _STAGES.get(stage[0], "file"), error_from_status(status))
        if machine.stage != "machine":
            return machine
    seal = ffi.new("mp_seal_v1_t*")
    if lib.mp_seal_check_file(os.fsencode(shown), seal) != 0:  # checked just now: changed since
        return Verdict(False, "seal", error_from_status(lib.mp_error_code()))
    code = _check_code(shown, seal.blob_offset, seal.blob_size)
    return code if machine is None or not code.ok else machine


def _check_tar(shown: str, flags: int) -> Verdict:
    """A ``.tar`` export as its load takes it: the tar seal and the rule for its members
    (before anything is extracted), its objects for this machine (before they are linked), then
    what the load of the linked library checks of the blob, read where the archive holds it."""
    try:
        check_tar_seal(shown)
        located = find_tar_blob(shown)
        if len(set(located.machines.values())) > 1:  # no machine links these: damage
            located.check_machine(shown, platform.machine())
    except FormatError as exc:  # IncompatibleError too
        return Verdict(False, "seal", exc)
    stage = ffi.new("int32_t*")
    status = lib.mp_library_check_blob(os.fsencode(shown), located.offset, located.size,
                                       load_options(flags).pointer, stage)
    if status != 0:
        return Verdict(False, _STAGES.get(stage[0], "blob"), error_from_status(status))
    code = _check_code(shown, located.offset, located.size)
    try:  # judged last, as for a library: the rest holds or fails on any machine
        located.check_machine(shown, platform.machine())
    except IncompatibleError as exc:
        return code if not code.ok else Verdict(False, "machine", exc)
    return code


def _check_code(path: str, offset: int, size: int) -> Verdict:
    """Every code frame of the blob at |offset| (|size| bytes, checked already) of the file at
    |path| decoded, as a load decodes each at its code's first use."""
    if size == 0:
        return Verdict(True)
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
        view = memoryview(mapped)
        base = ffi.from_buffer("uint8_t[]", mapped)
        blob = ffi.new("mp_blob_t**")
        try:
            span = ffi.new("mp_const_byte_span_t*", {"data": base + offset, "size": size})
            status = lib.mp_blob_parse(span[0], lib.MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, blob)
            if status != 0:  # parsed a moment ago: the file changed since
                return Verdict(False, "blob", error_from_status(status))
            info = ffi.new("mp_blob_info_t*")
            lib.mp_blob_info(blob[0], info)
            entry = ffi.new("mp_blob_module_t*")
            for i in range(info.module_count):
                flags = lib.mp_blob_module_flags(blob[0], i)
                if not flags & ENTRY_CODE_FRAMES:
                    continue
                lib.mp_blob_module(blob[0], i, entry)
                key = ffi.string(entry.type_key).decode()
                start = offset + entry.payload_offset
                try:
                    module = entry_module(key, base + start, entry.payload_size, flags)
                except ModpackError as exc:  # read a moment ago: the file changed since
                    return Verdict(False, "payloads", exc)
                for piece in code_pieces(key, describe_module(module)):
                    try:
                        decode_frame(view[start + piece.offset:
                                          start + piece.offset + piece.size])
                    except ModpackError as exc:
                        return Verdict(False, "code", type(exc)(
                            f"{path}: module[{i}] ({key}): its {piece.what} does not decode: "
                            f"{exc}; a load takes the file, and the first use of this code "
                            "fails (the frame is damaged, though the checksums over it hold: "
                            "they were computed over the damage); export it again"))
                del module
        finally:
            if blob[0] != ffi.NULL:
                lib.mp_blob_free(blob[0])
            ffi.release(base)
            view.release()
    return Verdict(True)
