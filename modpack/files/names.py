"""File names made from names found in files (array names, module names, device keys), which
may hold any character and run to kilobytes: safe and short enough for any file system."""

from __future__ import annotations

import re

__all__ = ["safe_file_name"]

_MAX_PART = 100  # bytes of the name kept: with a prefix and a suffix, far below NAME_MAX (255)


def safe_file_name(prefix: str, name: str, suffix: str) -> str:
    """``<prefix>-<name>.<suffix>`` with |name| cut to letters, digits, dot, dash and
    underscore, and to _MAX_PART characters; |prefix| (an index) keeps names unique."""
    part = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip(".")[:_MAX_PART] or "item"
    return f"{prefix}-{part}{suffix}"
