"""Progress of a layer's transfer: modpack's progress (:mod:`modpack.progress`: a bar per
layer on a terminal, else INFO lines when a layer starts and ends) on the ``modpack.oci``
logger, for every layer whatever its size (a registry's round trips make even a small one
worth a line)."""

from __future__ import annotations

import logging

from ..progress import Progress

__all__ = ["LayerProgress"]

log = logging.getLogger("modpack.oci")


class LayerProgress(Progress):
    """``with LayerProgress("pull", "deploy.so", size, bar=None) as p: p(n)`` per n bytes.
    |bar| None: a bar when stderr is a terminal and tqdm is installed."""

    def __init__(self, verb: str, name: str, total: int, *, bar: bool | None = None,
                 start: int = 0) -> None:
        super().__init__(verb, name, total, bar=bar, start=start, logger=log, threshold=0)
