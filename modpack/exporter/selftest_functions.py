"""Every self-test of an export calls a function the library has: checked once its host code is
compiled (host functions are known only from the objects: the ``__mp_func_<name>`` symbols the
``MP_EXPORT_*`` macros define), against those and the kernels its device modules list.

Why at export: a self-test that names a function the library lacks would fail on every device
it is deployed to; the export that makes it can say so, with the names it does have.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ..errors import ArgumentError
from ..format.elf_errors import ELF_READ_ERRORS
from ..format.layout import FUNC_SYMBOL_PREFIX
from ..selftests.spec import CheckedTest

__all__ = ["check_selftest_functions"]

# Kinds that hold arrays and define no function; any other kind without kernel_names (a user
# kind, whose loader may give functions) is one whose functions cannot be known before a load.
_NO_FUNCTIONS = frozenset({"const", "weights"})


def check_selftest_functions(tests: Sequence[CheckedTest], nodes: Iterable[Any],
                             objects: Iterable[Path]) -> None:
    """ArgumentError for the first of |tests| whose function neither the host |objects| nor a
    device module among |nodes| defines (a module of a kind whose functions are known only at
    load lets any name through)."""
    if not tests:
        return
    nodes = [n for n in nodes if n is not None]
    host = _host_functions(objects)
    kernels: set[str] = set()
    unknowable = False
    for node in nodes:
        names = getattr(node, "kernel_names", None)
        if names is None:
            unknowable |= (not getattr(node, "is_dso_exportable", False)
                           and getattr(node, "type_key", None) not in _NO_FUNCTIONS)
            continue
        kernels.update(names)
        name = getattr(node, "name", None)
        if name:
            kernels.update(f"{name}/{k}" for k in names)
    if host is None or unknowable:
        return
    for i, test in enumerate(tests):
        if test.function not in host and test.function not in kernels:
            raise ArgumentError(
                f"selftests[{i}] ({test.name!r}) calls {test.function!r}, which the library "
                f"does not define: its host functions are {sorted(host) or 'none'}, its "
                f"kernels {sorted(kernels) or 'none'}")


def _host_functions(objects: Iterable[Path]) -> set[str] | None:
    """The names of the host functions the objects export (defined global ``__mp_func_``
    symbols); None when an object cannot be read, so that nothing is refused on a guess."""
    names: set[str] = set()
    for path in objects:
        try:
            with open(path, "rb") as f:
                for section in ELFFile(f).iter_sections():
                    if not isinstance(section, SymbolTableSection):
                        continue
                    for sym in section.iter_symbols():
                        if (sym.name.startswith(FUNC_SYMBOL_PREFIX)
                                and sym["st_shndx"] != "SHN_UNDEF"
                                and sym["st_info"]["bind"] != "STB_LOCAL"):
                            names.add(sym.name[len(FUNC_SYMBOL_PREFIX):])
        except ELF_READ_ERRORS:
            return None
    return names
