"""The tools wing: what reads a library without running it, for people and for the commands.

``inspection`` (``modpack inspect``), ``verification`` (``verify_library``, ``modpack verify``),
``extraction`` (``modpack extract``), ``preflight`` (``modpack preflight``: the runtime's
``mp_preflight``), ``slim/`` (``modpack slim``), their shared judgement ``verdict`` (would a
load take this file, and would its code decode: the runtime's answer, asked first by every
tool) and ``weight_reports`` (weight files described and extracted). Tools sit above the
loaded side and the exporter and may use both; nothing below imports a tool (the one
exception, a signed OMS load listing a library's weight files with ``inspect_library``, is
named in tests/test_architecture.py).
"""
