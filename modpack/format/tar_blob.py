"""Where a ``.tar`` export's blob lies: the member (an ELF relocatable object, ``devc.o`` as the
exporter names it) that defines ``__dev_mblob``, and the blob's bytes in the archive — for
readers that take the blob in place (preflight, slim, the verdict) instead of linking the
objects, and for the link at load. The members are checked on the way (:mod:`.tar_members`; the
objects a load links are ELF relocatable objects; one blob at most), and the machine each object
is for is recorded, so that each of those readers refuses what the load refuses."""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass, field, replace

from elftools.elf.elffile import ELFFile
from elftools.elf.sections import SymbolTableSection

from ..errors import FormatError, IncompatibleError, MissingFileError
from .elf_errors import ELF_READ_ERRORS
from .layout import BLOB_SYMBOL
from .tar_members import check_members
from .tar_seal import SEAL_MEMBER

__all__ = ["ELF_ARCHES", "TarBlob", "find_tar_blob"]

# The blob objects modpack's ELF packer writes (packers.ELF_MACHINES), by e_machine as pyelftools
# names it -> the architecture's name (platform.machine()'s, the packer's).
ELF_ARCHES = {"EM_X86_64": "x86_64", "EM_AARCH64": "aarch64"}
# A machine (platform.machine()'s name) -> the e_machine of its objects, as pyelftools names it;
# a machine not here is not checked (its linker refuses what it must).
_MACHINE_OF = {"x86_64": "EM_X86_64", "aarch64": "EM_AARCH64", "riscv64": "EM_RISCV",
               "ppc64le": "EM_PPC64", "ppc64": "EM_PPC64", "s390x": "EM_S390",
               "loongarch64": "EM_LOONGARCH", "i686": "EM_386", "i386": "EM_386"}


@dataclass(frozen=True)
class TarBlob:
    """The blob object of a ``.tar`` (None fields: the archive holds host code only)."""

    members: list[tarfile.TarInfo]  # every member, the seal member last
    member: tarfile.TarInfo | None  # the one defining __dev_mblob
    offset: int  # the blob's first byte, in the archive
    size: int
    alignment: int  # of the blob's section
    machine: str  # the object's e_machine, as pyelftools names it ("EM_X86_64")
    # Each object the link takes (a member named *.o): its e_machine, as above.
    machines: dict[str, str] = field(default_factory=dict)

    @property
    def arch(self) -> str | None:
        """The blob object's architecture when the ELF packer writes such objects, else
        None."""
        return ELF_ARCHES.get(self.machine)

    def check_machine(self, path: str | os.PathLike[str], arch: str) -> None:
        """IncompatibleError naming the first object the link takes that is not for |arch|
        (``platform.machine()``'s name): a load links them for this machine, which its linker
        would refuse."""
        expected = _MACHINE_OF.get(arch)
        for name, machine in self.machines.items():
            if expected is not None and machine != expected:
                found = ELF_ARCHES.get(machine, machine)
                raise IncompatibleError(f"{os.fspath(path)}: member {name} is an object for "
                                        f"{found}, and this machine is {arch}: load it on a "
                                        f"{found} machine, or export it for {arch}")


def find_tar_blob(path: str | os.PathLike[str]) -> TarBlob:
    """The members of the tar at |path| and where its blob is; FormatError for an archive
    that a ``.tar`` export cannot be (:mod:`.tar_members`), one whose objects (the members
    named ``*.o``, which a load links) are not ELF relocatable objects, or with two blobs."""
    found: TarBlob | None = None
    machines: dict[str, str] = {}
    try:
        with tarfile.open(path, "r") as tar:
            members = tar.getmembers()
            check_members(path, members)
            for member in members:
                if member.name == SEAL_MEMBER:
                    continue
                f = tar.extractfile(member)
                assert f is not None  # check_members: regular files only
                if f.read(4) != b"\x7fELF":
                    if member.name.endswith(".o"):
                        raise FormatError(f"{path} is damaged: member {member.name} is not an "
                                          "ELF object file; a .tar export holds the objects a "
                                          "load links")
                    continue
                f.seek(0)
                elf = ELFFile(f)
                if member.name.endswith(".o"):
                    if elf["e_type"] != "ET_REL":
                        raise FormatError(f"{path} is damaged: member {member.name} is an ELF "
                                          f"file of type {elf['e_type']}, not a relocatable "
                                          "object; a .tar export holds the objects a load links")
                    machines[member.name] = elf["e_machine"]
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
    except (tarfile.TarError, *ELF_READ_ERRORS) as exc:
        if isinstance(exc, FileNotFoundError):
            raise MissingFileError(f"no such library: {path}") from None
        raise FormatError(f"{path} is not a readable .tar export: "
                          f"{exc or type(exc).__name__}") from None
    if found is None:
        return TarBlob(members, None, 0, 0, 1, "", machines)
    return replace(found, machines=machines)
