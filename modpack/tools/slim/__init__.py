"""``modpack slim``: a library cut down to the device code a fleet needs (slim_library)."""

from .library import SlimReport, slim_library

__all__ = ["SlimReport", "slim_library"]
