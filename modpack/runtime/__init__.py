"""The Python binding over the C runtime (``modpack._rt``, built from ``csrc/``)."""

try:  # both extensions, before any module of the binding imports one
    from .. import _rt  # noqa: F401
    from . import _calls  # noqa: F401
except ImportError as exc:
    from .unbuilt import unbuilt_message

    raise ImportError(unbuilt_message()) from exc
