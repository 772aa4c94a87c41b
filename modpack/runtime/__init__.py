"""The Python binding over the C runtime (``modpack._rt``, built from ``csrc/``)."""
