"""What pyelftools raises, or lets escape, on a malformed ELF file: its own ELFError, and the
errors of the struct parsing, lookups and decoding underneath it. The tools that read files
with pyelftools (inspect, the ``.tar`` blob finder, slim) turn these into a FormatError that
names the file, never a traceback."""

from __future__ import annotations

import struct

from elftools.common.exceptions import ELFError
from elftools.construct.core import ConstructError

__all__ = ["ELF_READ_ERRORS"]

ELF_READ_ERRORS = (ELFError, ConstructError, struct.error, ValueError, IndexError, KeyError,
                   UnicodeDecodeError, EOFError, OverflowError, ZeroDivisionError, OSError)
