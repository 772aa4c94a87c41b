"""Callable functions over the runtime's ``mp_function_t`` handles.

Calling converts the arguments in C (``modpack.runtime._calls``, built from ``calls.c``), the
one path from Python values to the calling convention, and runs the call without the GIL.
"""

from __future__ import annotations

import numpy as np

from ..errors import ArgumentError, InternalError
from . import _calls
from .array import Array
from .binding import error_from_status, lib
from .dtypes import BUFFER_FORMATS, NUMPY_TYPES
from .values import LocalMemory, normalize

__all__ = ["Function", "lookup"]

Function = _calls.Function
"""A function from a loaded module, called with Python scalars and arrays (a C type: calling
one goes from Python's vectorcall straight into the conversion, no Python frame in between).

Holds a runtime reference, so the module it came from (and the library its code lives in)
stays loaded for as long as the function object exists."""


def lookup(module_address: int, name: str, query_imports: bool) -> Function:
    """The function |name| of the runtime module at |module_address| (and, if
    |query_imports|, its imports); NotFoundError naming it when absent.

    A qualified name, ``"module/kernel"``, names the module it is in: only the module of
    that name answers, wherever it is in the tree below, so its imports are searched even
    without |query_imports| — as host code finds it (``mp_backend_get_function``), and as
    ``lib["f32/Xgemm"]`` on a library's root expects."""
    if isinstance(name, str) and "/" in name:
        query_imports = True
    return _calls.lookup(module_address, name, query_imports)


_calls.init(lib.modpack_calls_api(), Array, LocalMemory, np.ndarray, BUFFER_FORMATS, normalize,
            error_from_status, ArgumentError, InternalError)


def _take_numpy_arrays_in_place() -> bool:
    """Let calls read numpy arrays from numpy's array struct (no buffer protocol: about 50 ns
    less per array), once a probe array reads through that layout as numpy says it is; with a
    numpy whose layout differed, arrays would keep going through the buffer protocol."""
    probe = np.zeros((3, 4), np.float32)[:, ::2]
    probe.flags.writeable = False
    expected = (probe.ctypes.data, probe.shape, probe.strides, probe.dtype.num,
                probe.dtype.byteorder, probe.flags.writeable, probe.flags.c_contiguous)
    return bool(_calls.numpy_in_place(NUMPY_TYPES, probe, expected))


NUMPY_IN_PLACE = _take_numpy_arrays_in_place()
