"""Shipping libraries through OCI registries: ``push``, ``pull``, loading ``oci://``
references from the local store, OpenSSF model signing, and the store's upkeep. One concept
per module: reference.py (``oci://`` names), client.py (the distribution API through
oras-py), artifact.py (manifests, index, config), push.py, pull.py, select.py (which variant a
device needs), store.py (the local content-addressed store), oms.py (OMS bundles),
load.py (``load_module("oci://...")``), progress.py, media.py.

Needs the ``oci`` extra (``pip install modpack[oci]``): oras-py and model_signing."""

from __future__ import annotations

from .client import RegistrySettings
from .pull import Pulled, pull
from .push import PushResult, push
from .reference import Reference, parse_reference

__all__ = ["Pulled", "PushResult", "Reference", "RegistrySettings", "parse_reference", "pull",
           "push"]
