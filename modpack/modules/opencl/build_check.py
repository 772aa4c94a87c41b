"""The build check of ``opencl_module(..., build_check=True)``: the source built at export, with
its build options, on each OpenCL device of the exporting machine, through the runtime's own
OpenCL path (the build the first launch does), so a source that does not build fails the export
instead of the first launch on the deployment machine.

Off by default, because it proves less than it seems and costs where nothing asked for it: the
exporting machine's driver is not the deployment's (PoCL here, a vendor's driver there accept
different extensions and dialects, so a failure here may be no failure there, and a success
here no success there); an export would succeed or fail by which drivers happen to be installed
where it runs; and each build takes its time at every export.
"""

from __future__ import annotations

import warnings

from ...errors import CompileError, ModpackWarning, UnavailableError
from ...runtime.binding import error_from_status, ffi, lib
from ...runtime.devices import device_count

__all__ = ["check_build"]


def check_build(source: str, build_options: str, what: str, stacklevel: int = 2) -> int:
    """Build |source| with |build_options| on every OpenCL device here; CompileError naming
    |what| (the module), the device and its build log when a build fails. Returns how many
    devices built it; with none here, warns (ModpackWarning) that nothing was checked."""
    count = device_count("opencl")
    if count == 0:
        warnings.warn(
            f"{what}: build_check=True, but this machine has no OpenCL device, so the source "
            "was not built; it is built at its first launch where the library runs",
            ModpackWarning, stacklevel=stacklevel + 1)
        return 0
    code, options = source.encode(), build_options.encode()
    size = ffi.new("uint64_t*")
    for device_id in range(count):
        status = lib.mp_opencl_build_binary(code, len(code), options, device_id, ffi.NULL, 0,
                                            size)
        if status == 0:
            continue
        error = error_from_status(status)
        if isinstance(error, UnavailableError) and "no program binary" in str(error):
            continue  # it built; the driver just keeps no binary to hand out
        if "failed to build" in str(error):
            raise CompileError(f"{what} does not build, checked at export (build_check=True): "
                               f"{error}")
        raise error
    return count
