"""Where a ``.tar`` export's blob lies: the member (an ELF relocatable object, ``devc.o`` as the
exporter names it) that defines ``__dev_mblob``, and the blob's bytes in the archive — for
readers that take the blob in place (preflight, slim) instead of linking the objects."""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ..errors import FormatError
from .layout import BLOB_SYMBOL
from .tar_seal import SEAL_MEMBER

__all__ = ["ELF_ARCHES", "TarBlob", "find_tar_blob"]

# The blob objects modpack's ELF packer writes (packers.ELF_MACHINES), by e_machine as pyelftools
# names it -> the architecture's name (platform.machine()'s, the packer's).
ELF_ARCHES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}


@dataclass(frozen=True)
class TarBlob:
    """The blob object of a ``.tar`` (None fields: the archive holds host code only)."""

    members: list[tarfile.TarInfo]  # every member, the seal member last
    member: tarfile.TarInfo | None  # the one defining __dev_mblob
    offset: int  # the blob's first byte, in the archive
    size: int
    alignment: int  # of the blob's section
    machine: str  # the object's e_machine, as pyelftools names it ("EM_X86_64")

    @property
    def arch(self) -> str | None:
        """The blob object's architecture when the ELF packer writes such objects, else
        None."""
        return ELF_ARCHES.get(self.machine)


def find_tar_blob(path: str | os.PathLike[str]) -> TarBlob:
    """The members of the tar at |path| and where its blob is; FormatError for an archive
    whose members are not objects, or with two blobs."""
    found: TarBlob | None = None
    try:
        with tarfile.open(path, "r") as tar:
            members = tar.getmembers()
            for member in members:
                if member.name == SEAL_MEMBER or not member.isfile():
                    continue
                f = tar.extractfile(member)
                assert f is not None  # a regular file
                if f.read(4) != b"\x7fELF":
                    continue
                f.seek(0)
                elf = ELFFile(f)
                for table in elf.iter_sections():
                    if not isinstance(table, SymbolTableSection):
                        continue
                    for symbol in table.iter_symbols():
                        shndx = symbol["st_shndx"]
                        if symbol.name != BLOB_SYMBOL or not isinstance(shndx, int):
                            continue
                        if found is not None and found.member is not None:
                            raise FormatError(f"{path}: members {found.member.name} and "
                                              f"{member.name} both define {BLOB_SYMBOL}")
                        section = elf.get_section(shndx)
                        if section["sh_type"] == "SHT_NOBITS" or (
                                symbol["st_value"] + symbol["st_size"] > section["sh_size"]):
                            raise FormatError(f"{path}: {member.name}'s {BLOB_SYMBOL} lies "
                                              "outside its section's bytes")
                        found = TarBlob(members, member, member.offset_data
                                        + section["sh_offset"] + symbol["st_value"],
                                        symbol["st_size"], section["sh_addralign"] or 1,
                                        elf["e_machine"])
    except (tarfile.TarError, ELFError, EOFError) as exc:
        raise FormatError(f"{path} is not a readable .tar export: {exc}") from None
    return found or TarBlob(members, None, 0, 0, 1, "")
