"""The seal of a ``.tar`` export: its last member, ``MODPACK-SEAL``, lists every other member
with its size and XXH3-128, and ends with the XXH3-128 of those lines. ``load_module`` checks it
before anything is extracted or linked, so a damaged archive is refused, never linked into a
library that loads "host code only".

    modpack tar seal 1
    <xxh3-128 hex> <size> <name>
    ...
    seal <xxh3-128 hex of the lines above>
"""

from __future__ import annotations

import io
import os
import tarfile
from typing import IO

import xxhash

from ..errors import FormatError

__all__ = ["SEAL_MEMBER", "check_tar_seal", "has_tar_seal", "seal_tar"]

SEAL_MEMBER = "MODPACK-SEAL"
_FIRST_LINE = "modpack tar seal 1"
_CHUNK = 1 << 20


def seal_tar(path: str | os.PathLike) -> None:
    """Append the seal member to the tar at |path|."""
    with tarfile.open(path, "r") as tar:
        lines = [_FIRST_LINE] + [f"{_digest(tar.extractfile(m))} {m.size} {m.name}"
                                 for m in tar.getmembers()]
    text = _with_seal_line(lines).encode()
    with tarfile.open(path, "a") as tar:
        info = tarfile.TarInfo(SEAL_MEMBER)
        info.size = len(text)
        info.mode = 0o644
        tar.addfile(info, io.BytesIO(text))


def check_tar_seal(path: str | os.PathLike) -> list[str]:
    """The names of the members of the tar at |path|, once every one matches its seal; raises
    FormatError naming the damage (or the absence of a seal)."""
    try:
        with tarfile.open(path, "r") as tar:
            members = tar.getmembers()
            if not members or members[-1].name != SEAL_MEMBER:
                raise FormatError(f"{path} carries no modpack seal (no {SEAL_MEMBER} member at "
                                  "its end): it was damaged or truncated, or made without "
                                  "modpack's export; export it again, or load it with "
                                  "allow_unsealed=True")
            text = tar.extractfile(members[-1]).read().decode("utf-8", "replace")
            expected = _parse(text, path)
            found = {m.name: m for m in members[:-1]}
            if len(found) != len(members) - 1 or set(found) != set(expected):
                raise FormatError(f"{path} is damaged: its members {sorted(found)} are not the "
                                  f"sealed ones {sorted(expected)}")
            for name, member in found.items():
                size, digest = expected[name]
                if not member.isfile() or member.size != size:
                    raise FormatError(f"{path} is damaged: member {name} has {member.size} "
                                      f"bytes, sealed with {size}")
                if _digest(tar.extractfile(member)) != digest:
                    raise FormatError(f"{path} is damaged: member {name} does not match its "
                                      "seal; export it again")
            return list(found)
    except (tarfile.TarError, EOFError, OSError) as exc:
        if isinstance(exc, FileNotFoundError):
            raise
        raise FormatError(f"{path} is not a readable tar archive: {exc}") from None


def has_tar_seal(path: str | os.PathLike) -> bool:
    """Whether the tar at |path| has a seal member (a damaged one too), so that a damaged
    seal is never taken for an archive made without one."""
    try:
        with tarfile.open(path, "r") as tar:
            return any(m.name == SEAL_MEMBER for m in tar.getmembers())
    except (tarfile.TarError, EOFError, OSError):
        return False


def _parse(text: str, path: object) -> dict[str, tuple[int, str]]:
    lines = text.rstrip("\n").split("\n")
    if len(lines) < 2 or lines[0] != _FIRST_LINE or _with_seal_line(lines[:-1]) != text:
        raise FormatError(f"{path} is damaged: its {SEAL_MEMBER} member does not match itself")
    out = {}
    for line in lines[1:-1]:
        try:
            digest, size, name = line.split(" ", 2)
            out[name] = (int(size), digest)
        except ValueError:
            raise FormatError(f"{path} is damaged: {SEAL_MEMBER} has a line {line!r}") from None
    return out


def _with_seal_line(lines: list[str]) -> str:
    body = "".join(line + "\n" for line in lines)
    return body + f"seal {xxhash.xxh3_128_hexdigest(body.encode())}\n"


def _digest(f: IO[bytes] | None) -> str:
    digest = xxhash.xxh3_128()
    while f is not None and (chunk := f.read(_CHUNK)):
        digest.update(chunk)
    return digest.hexdigest()
