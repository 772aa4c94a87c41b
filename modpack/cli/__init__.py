"""The ``modpack`` command line: ``modpack <command> ...`` (see :mod:`modpack.cli.main`)."""

from .main import main

__all__ = ["main"]
