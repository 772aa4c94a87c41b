"""The seal of a ``.tar`` export: its last member, ``MODPACK-SEAL``, lists every other member
with its size and XXH3-128, then the XXH3-128 of every byte of the archive before the seal
member (so tar headers and padding are covered too), and ends with the XXH3-128 of those lines.
After the seal member the archive holds only zeros (tar's end blocks). ``load_module`` checks it
before anything is extracted or linked, so a damaged archive is refused, never linked into a
library that loads "host code only".

    modpack tar seal 2
    <xxh3-128 hex> <size> <name>
    ...
    archive <xxh3-128 hex> <bytes before the seal member>
    seal <xxh3-128 hex of the lines above>

Version 1 (the first sealed exports) has no ``archive`` line; it is still read.
"""

from __future__ import annotations

import io
import os
import tarfile

import xxhash

from ..errors import FormatError
from .tar_members import check_members

__all__ = ["SEAL_MEMBER", "check_tar_seal", "has_tar_seal", "seal_tar"]

SEAL_MEMBER = "MODPACK-SEAL"
_FIRST_LINES = ("modpack tar seal 1", "modpack tar seal 2")
_CHUNK = 1 << 20
_BLOCK = tarfile.BLOCKSIZE


def seal_tar(path: str | os.PathLike[str]) -> None:
    """Append the seal member to the tar at |path|."""
    with tarfile.open(path, "r") as tar:
        members = tar.getmembers()
    end = _end_of(members[-1]) if members else 0  # where the seal member will go
    digests, archive = _digests(path, members, end)
    lines = [_FIRST_LINES[-1]] + [f"{digest} {m.size} {m.name}"
                                  for digest, m in zip(digests, members)]
    lines.append(f"archive {archive} {end}")
    text = _with_seal_line(lines).encode()
    with tarfile.open(path, "a", format=tarfile.PAX_FORMAT, encoding="utf-8") as tar:
        tar.addfile(_seal_info(len(text)), io.BytesIO(text))


def _seal_info(size: int) -> tarfile.TarInfo:
    """The seal member's header: nothing of this machine (time, owner), so the reader can
    require exactly these bytes (the seal cannot cover its own header)."""
    info = tarfile.TarInfo(SEAL_MEMBER)
    info.size = size
    info.mode = 0o644
    return info


def _seal_header(size: int) -> bytes:
    return _seal_info(size).tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")


def check_tar_seal(path: str | os.PathLike[str]) -> list[str]:
    """The names of the members of the tar at |path|, once every one matches its seal; raises
    FormatError naming the damage (or the absence of a seal)."""
    try:
        with tarfile.open(path, "r") as tar:
            members = tar.getmembers()
            if not members or members[-1].name != SEAL_MEMBER:
                if not any(m.name.endswith(".o") for m in members):
                    raise FormatError(
                        f"{path} was not made by modpack: this tar archive carries no modpack "
                        f"seal ({SEAL_MEMBER}) and none of the object files a .tar export "
                        "holds; load_module loads the .so and .tar files modpack's "
                        "export_library writes")
                raise FormatError(f"{path} carries no modpack seal (no {SEAL_MEMBER} member at "
                                  "its end): it was damaged or truncated, or made without "
                                  "modpack's export; export it again, or load it with "
                                  "allow_unsealed=True")
            seal = members[-1]
            content = tar.extractfile(seal) if seal.isfile() else None
            if content is None:  # a link or a folder named like the seal
                raise FormatError(f"{path} is damaged: its seal member {SEAL_MEMBER} is not a "
                                  "regular file")
            text = content.read().decode("utf-8", "replace")
            expected, archive = _parse(text, path)
            check_members(path, members[:-1])  # regular files, plain names, each once
            found = {member.name: member for member in members[:-1]}
            if set(found) != set(expected):
                raise FormatError(f"{path} is damaged: its members {sorted(found)} are not the "
                                  f"sealed ones {sorted(expected)}")
            for name, member in found.items():
                size = expected[name][0]
                if member.size != size:
                    raise FormatError(f"{path} is damaged: member {name} has {member.size} "
                                      f"bytes, sealed with {size}")
        if archive is not None and seal.offset != archive[1]:
            raise FormatError(f"{path} is damaged: its tar headers or padding before byte "
                              f"{archive[1]} do not match its seal; export it again")
        # One read of the archive for the members' digests and the archive's.
        digests, whole = _digests(path, members[:-1], seal.offset)
        for digest, member in zip(digests, members[:-1]):
            if digest != expected[member.name][1]:
                raise FormatError(f"{path} is damaged: member {member.name} does not match "
                                  "its seal; export it again")
        if archive is not None:
            _check_archive_bytes(path, archive, whole, seal)
        return list(found)
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise FormatError(f"{path} is not a readable tar archive: {exc}") from None


def has_tar_seal(path: str | os.PathLike[str]) -> bool:
    """Whether the tar at |path| has a seal member (a damaged one too), so that a damaged
    seal is never taken for an archive made without one."""
    try:
        with tarfile.open(path, "r") as tar:
            return any(m.name == SEAL_MEMBER for m in tar.getmembers())
    except (tarfile.TarError, EOFError, OSError):
        return False


def _check_archive_bytes(path: str | os.PathLike[str], archive: tuple[str, int], found: str,
                        seal: tarfile.TarInfo) -> None:
    """The bytes before the seal member (their digest |found|) match its digest; after its
    text there are only zeros (its padding and tar's end blocks), up to the end of a whole tar
    record."""
    digest, size = archive
    with open(path, "rb") as f:
        if found != digest:
            raise FormatError(f"{path} is damaged: its tar headers or padding before byte "
                              f"{size} do not match its seal; export it again")
        f.seek(size)
        if f.read(_BLOCK) != _seal_header(seal.size):  # every bit of it, checksum field too
            raise FormatError(f"{path} is damaged: its {SEAL_MEMBER} member's tar header is "
                              "not the one modpack writes; export it again")
        end = f.seek(0, os.SEEK_END)
        if end < _end_of(seal) + 2 * _BLOCK or end % tarfile.RECORDSIZE:
            raise FormatError(f"{path} is damaged: it ends at byte {end}, not after tar's end "
                              f"blocks (it was truncated or extended); export it again")
        f.seek(seal.offset_data + seal.size)
        while chunk := f.read(_CHUNK):
            if chunk.count(0) != len(chunk):
                raise FormatError(f"{path} is damaged: bytes after its {SEAL_MEMBER} member "
                                  "are not tar's zero padding and end blocks; export it again")


def _end_of(member: tarfile.TarInfo) -> int:
    """The offset just past |member|'s data, padded to tar's block."""
    return member.offset_data + -(-member.size // _BLOCK) * _BLOCK


def _parse(text: str, path: object
           ) -> tuple[dict[str, tuple[int, str]], tuple[str, int] | None]:
    """The sealed members (name -> (size, digest)) and the archive line, if any."""
    lines = text.rstrip("\n").split("\n")
    if len(lines) < 2 or lines[0] not in _FIRST_LINES or _with_seal_line(lines[:-1]) != text:
        raise FormatError(f"{path} is damaged: its {SEAL_MEMBER} member does not match itself")
    out, archive = {}, None
    body = lines[1:-1]
    if lines[0] != _FIRST_LINES[0]:  # version 2 and on: the last line covers the archive
        fields = body.pop().split(" ") if body else []
        if len(fields) != 3 or fields[0] != "archive" or not fields[2].isdigit():
            raise FormatError(f"{path} is damaged: {SEAL_MEMBER} has no archive line")
        archive = (fields[1], int(fields[2]))
    for line in body:
        try:
            digest, size, name = line.split(" ", 2)
            out[name] = (int(size), digest)
        except ValueError:
            raise FormatError(f"{path} is damaged: {SEAL_MEMBER} has a line {line!r}") from None
    return out, archive


def _with_seal_line(lines: list[str]) -> str:
    body = "".join(line + "\n" for line in lines)
    return body + f"seal {xxhash.xxh3_128_hexdigest(body.encode())}\n"


def _digests(path: str | os.PathLike[str], members: list[tarfile.TarInfo], end: int
             ) -> tuple[list[str], str]:
    """The XXH3-128 of each of |members|' data and of the archive's first |end| bytes, in one
    sequential read (a 1 GiB export's seal and check each read it once, not twice)."""
    whole = xxhash.xxh3_128()
    digests = [xxhash.xxh3_128() for _ in members]
    ranges = sorted((m.offset_data, m.offset_data + m.size, i) for i, m in enumerate(members))
    first = 0  # the first member not hashed whole yet
    with open(path, "rb") as f:
        position = 0
        while position < end:
            chunk = memoryview(f.read(min(_CHUNK, end - position)))
            if not chunk:
                raise FormatError(f"{path} is damaged: it ends at byte {position}, before its "
                                  f"members end (byte {end}); export it again")
            whole.update(chunk)
            stop = position + len(chunk)
            for begin, finish, i in ranges[first:]:
                if begin >= stop:
                    break
                low, high = max(begin, position), min(finish, stop)
                if low < high:
                    digests[i].update(chunk[low - position : high - position])
                if finish > stop:
                    break
                first += 1
            position = stop
    return [d.hexdigest() for d in digests], whole.hexdigest()
