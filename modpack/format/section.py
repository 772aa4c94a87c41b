"""Where the blob goes inside an object file: its section, for a target machine.

A library exported as ``.so`` is linked with an *anchor* instead: a tiny placeholder blob in
``.modpack.blob``, after which the blob itself is written into the library
(``modpack/format/image.py``). When the linker does take the whole blob (a ``.tar``
linked later, a custom packer), on x86-64 it goes to a *large* data section
(``.lrodata.__dev_mblob``, flag ``SHF_X86_64_LARGE``), which the linker places after the code
and data: blobs over 2 GiB then still link, where ``.rodata`` fails with relocation overflows.
Other targets use ``.rodata.__dev_mblob``. Every packer takes the section from here.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass

from .layout import BLOB_SYMBOL

__all__ = ["ANCHOR", "BlobSection", "blob_section", "machine_name"]

# Spellings of one architecture, as compilers (-dumpmachine), platform.machine() and LLVM
# triples write them.
_ALIASES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}


def machine_name(machine: str | None = None) -> str:
    """The architecture of |machine| (a triple such as ``x86_64-linux-gnu``, or a bare name;
    default: this machine's), normalised: ``x86_64``, ``aarch64``, ..."""
    arch = (machine or platform.machine()).split("-")[0].lower()
    return _ALIASES.get(arch, arch)


@dataclass(frozen=True)
class BlobSection:
    name: str   # ".lrodata.__dev_mblob"
    large: bool  # the x86-64 large-section flag (SHF_X86_64_LARGE, "l" in assembler flags)


# The anchor object's section: a placeholder __dev_mblob that the blob replaces after the link
# (modpack/format/image.py).
ANCHOR = BlobSection(".modpack.blob", False)


def blob_section(machine: str | None = None) -> BlobSection:
    """The blob's section for |machine| (see the module's docstring)."""
    if machine_name(machine) == "x86_64":
        return BlobSection(f".lrodata.{BLOB_SYMBOL}", True)
    return BlobSection(f".rodata.{BLOB_SYMBOL}", False)
