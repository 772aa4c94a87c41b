"""Type stub for ``modpack.runtime._calls``, the C extension built from calls.c: the one path
from Python values to the calling convention, and :class:`Function`, the type of the
functions it calls."""

from collections.abc import Callable, Mapping
from typing import Any, final

MAX_NDIM: int
"""The most dimensions an array passed by a call may have."""
DLPACK_MAJOR_VERSION: int
DLPACK_MINOR_VERSION: int
"""The DLPack version modpack speaks (dlpack.h)."""
DLPACK_FLAG_READ_ONLY: int
DLPACK_FLAG_IS_COPIED: int
"""DLPack 1.x's flags of a versioned tensor (DLPACK_FLAG_BITMASK_*)."""

@final
class Function:
    """A function from a loaded module, called with Python scalars and arrays.

    Holds a runtime reference, so the module it came from (and the library its code lives in)
    stays loaded for as long as the function object exists. Function objects come from
    ``LoadedModule.get_function`` and ``module[name]``; the type cannot be instantiated."""

    @property
    def name(self) -> str:
        """The name it was found by."""
    @property
    def _address(self) -> int: ...
    @classmethod
    def _from_address(cls, address: int, name: str = ..., /) -> Function: ...
    def __call__(self, *args: Any) -> Any:
        """Call the function: ints, floats, ``None``, str, numpy arrays, modpack arrays,
        functions and DLPack producers in; an int, float, str, array, function or ``None``
        back, as the function's signature says."""

def init(api: int, array_type: type, local_memory_type: type, ndarray_type: type,
         buffer_formats: Mapping[str, tuple[int, int, int]],
         normalize: Callable[[Any, int], Any],
         make_error: Callable[[int], BaseException],
         argument_error: type[BaseException], internal_error: type[BaseException], /) -> None: ...
def numpy_in_place(types: Mapping[int, tuple[int, int, int, int]], probe: Any,
                   expected: tuple[int, tuple[int, ...], tuple[int, ...], int, str, bool, bool],
                   /) -> bool:
    """Read numpy arrays in place from numpy's array struct from now on if |probe| reads
    through that layout as |expected| says (data address, shape, strides, type number, byte
    order, writeable, C-contiguous); False (and the buffer protocol) otherwise."""
def call(function: Function, /, *args: Any) -> Any: ...
def array_digest(array: Any, /) -> int | None:
    """XXH3-64 of the bytes of an array a const module can take as it is (exactly a numpy
    ndarray, C-contiguous, of a standard native-endian dtype), read in place; None for
    anything else."""
def lookup(module_address: int, name: str, query_imports: bool, /) -> Function: ...
def dlpack_capsule(managed_tensor_address: int, versioned: bool, /) -> Any:
    """A ``"dltensor"`` (DLManagedTensor) or ``"dltensor_versioned"`` capsule owning it."""
def capsule_tensor(capsule: object, /) -> tuple[int, bool] | None:
    """(managed tensor address, versioned) of an unused DLPack capsule, still the capsule's;
    None for anything else."""
def capsule_consume(capsule: object, /) -> None:
    """Mark a DLPack capsule taken over (renamed ``"used_..."``)."""
