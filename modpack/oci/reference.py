"""``oci://HOST/REPO:TAG@DIGEST``: where an artifact lives in a registry.

HOST is a registry's host name with an optional port (``ghcr.io``, ``127.0.0.1:5000``), REPO
one or more lowercase path components (``team/model``), TAG a tag (``latest`` when none is
given) and DIGEST, when given, the manifest's content digest (``sha256:...``), which then
decides what is pulled (the tag only names it). The grammar is the distribution spec's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ArgumentError

__all__ = ["SCHEME", "Reference", "is_reference", "parse_reference"]

SCHEME = "oci://"
_HOST = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*"
                   r"|\[[0-9A-Fa-f:]+\])(?::[0-9]{1,5})?$")
_REPOSITORY = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
                         r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_FORM = "oci://HOST/REPO:TAG (e.g. oci://ghcr.io/team/model:v1, or ...@sha256:<64 hex digits>)"


@dataclass(frozen=True)
class Reference:
    """A parsed ``oci://`` reference; ``str()`` gives it back in its full form."""

    host: str
    repository: str
    tag: str = "latest"
    digest: str | None = None

    @property
    def manifest_reference(self) -> str:
        """What the registry is asked for: the digest when one is given, else the tag."""
        return self.digest or self.tag

    def with_tag(self, tag: str) -> Reference:
        return Reference(self.host, self.repository, tag, None)

    def with_digest(self, digest: str) -> Reference:
        return Reference(self.host, self.repository, self.tag, digest)

    @property
    def name(self) -> str:
        """HOST/REPO, as oras and Docker name a repository."""
        return f"{self.host}/{self.repository}"

    def __str__(self) -> str:
        return f"{SCHEME}{self.name}:{self.tag}" + (f"@{self.digest}" if self.digest else "")


def is_reference(value: object) -> bool:
    """Whether |value| is a str naming a registry artifact (starts with ``oci://``)."""
    return isinstance(value, str) and value.startswith(SCHEME)


def parse_reference(text: str) -> Reference:
    """|text| as a Reference; ArgumentError naming the part that is wrong and the form."""
    if not isinstance(text, str) or not text.startswith(SCHEME):
        raise ArgumentError(f"{text!r} is not a registry reference: write it as {_FORM}")
    rest = text[len(SCHEME):]
    digest = None
    if "@" in rest:
        rest, digest = rest.rsplit("@", 1)
        if not _DIGEST.match(digest):
            raise ArgumentError(f"{text}: the digest {digest!r} is not sha256: followed by 64 "
                                f"lowercase hex digits: write it as {_FORM}")
    host, slash, path = rest.partition("/")
    if not slash or not path:
        raise ArgumentError(f"{text}: no repository after the host: write it as {_FORM}")
    if not _HOST.match(host):
        raise ArgumentError(f"{text}: {host!r} is not a registry host (a host name or address, "
                            f"with an optional :PORT): write it as {_FORM}")
    tag = "latest"
    last = path.rsplit("/", 1)[-1]
    if ":" in last:
        path, tag = path.rsplit(":", 1)
        if not _TAG.match(tag):
            raise ArgumentError(f"{text}: {tag!r} is not a tag (letters, digits, _ . -, at most "
                                f"128, not starting with . or -): write it as {_FORM}")
    if not _REPOSITORY.match(path):
        raise ArgumentError(f"{text}: {path!r} is not a repository name (lowercase letters, "
                            f"digits and . _ - between them, components joined by /): write it "
                            f"as {_FORM}")
    return Reference(host, path, tag, digest)
