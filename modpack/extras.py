"""Optional dependencies, by the extra that installs them: a load-only install (``pip install
modpack``: the runtime, loading and the command-line tools) leaves out what authoring needs.
Features that need an extra ask for it here when used (never at import), and a missing one is a
:class:`MissingExtraError` naming the command that installs it. The extras themselves are
``[project.optional-dependencies]`` in pyproject.toml (``build`` also has ``sign``'s
cryptography, so an authoring machine signs what it exports)."""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType

from .errors import MissingExtraError

__all__ = ["EXTRAS", "import_extra", "require_extra"]

# The extra -> the modules its features import.
EXTRAS: dict[str, tuple[str, ...]] = {
    "build": ("llvmlite", "tqdm"),
    "sign": ("cryptography",),
    # registries (oras-py, over requests) and OpenSSF model signing (model_signing, which
    # imports pyOpenSSL without declaring it)
    "oci": ("oras", "requests", "model_signing", "OpenSSL"),
}


def require_extra(extra: str, feature: str) -> None:
    """Return if every module of |extra| can be imported, else raise MissingExtraError saying
    that |feature| needs ``pip install modpack[extra]``. Nothing is imported."""
    missing = [name for name in EXTRAS[extra] if _missing(name)]
    if missing:
        raise _error(extra, feature, missing)


def import_extra(module: str, extra: str, feature: str) -> ModuleType:
    """``import module``, or MissingExtraError naming |extra| when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name is not None and module.split(".")[0] != exc.name.split(".")[0]:
            raise  # the module is there but broken: its own error says more
        raise _error(extra, feature, [module.split(".")[0]]) from None


def _missing(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is None
    except (ImportError, ValueError):
        return True


def _error(extra: str, feature: str, missing: list[str]) -> MissingExtraError:
    return MissingExtraError(
        f"{feature} needs {', '.join(missing)}, which this install of modpack leaves out "
        f"(modpack's '{extra}' extra): pip install modpack[{extra}]")
