"""modpack's OCI artifact, written and read: one image manifest per library (its layers the
library and each weight file, raw, so a weight layer's digest is its file's SHA-256 and a
registry stores it once however many tags, variants and models name it; its config what
``modpack inspect --json`` says of the library, inside a ModelPack config), and for a library
pushed in device variants an image index with one manifest per device. docs/format.md, "In a
registry", is the reference."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FormatError
from . import media
from .client import _canonical

__all__ = ["Artifact", "Layer", "config_document", "describe_file", "index_document",
           "manifest_document", "parse_index", "parse_manifest"]

_SAFE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.+-]{0,254}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


@dataclass
class Layer:
    """One file of the artifact: its digest, size, media type, file name and role."""

    digest: str
    size: int
    media_type: str
    title: str
    role: str
    path: Path | None = None  # the local file, when pushing

    def descriptor(self) -> dict[str, Any]:
        annotations = {media.ANNOTATION_TITLE: self.title, media.ANNOTATION_FILEPATH: self.title,
                       media.ANNOTATION_ROLE: self.role}
        if self.media_type != media.WEIGHTS_FOREIGN:
            annotations[media.ANNOTATION_UNTESTED] = "true"  # a type of modpack's own
        return {"mediaType": self.media_type, "digest": self.digest, "size": self.size,
                "annotations": annotations}


@dataclass
class Artifact:
    """A parsed manifest of modpack's: the library's layer, the weight files' layers, the
    config's descriptor and the device its variant is for (None: every device)."""

    digest: str
    body: bytes
    config: dict[str, Any]
    layers: list[Layer] = field(default_factory=list)
    device: str | None = None

    @property
    def library(self) -> Layer:
        return next(layer for layer in self.layers if layer.role == "library")

    @property
    def weights(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.role == "weights"]


def describe_file(path: Path, title: str, role: str, media_type: str) -> Layer:
    """The layer of the file at |path| (its SHA-256 read in chunks)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
            size += len(chunk)
    return Layer("sha256:" + h.hexdigest(), size, media_type, title, role, path)


def config_document(inspection: dict[str, Any], title: str, layers: list[Layer]) -> bytes:
    """The config blob: ModelPack's fields (the model's name, its format, the layers' digests)
    and, under ``modpack``, the library's inspection (its path replaced by its file name, so
    the same library gives the same config wherever it was pushed from)."""
    described = dict(inspection)
    described["path"] = title
    document = {
        "descriptor": {"name": title},
        "config": {"format": "modpack"},
        "modelfs": {"type": "layers", "diffIds": [layer.digest for layer in layers]},
        "modpack": described,
    }
    return _canonical(document)


def manifest_document(config: bytes, layers: list[Layer], device: str | None) -> bytes:
    annotations = {media.ANNOTATION_TITLE: layers[0].title}
    if device is not None:
        annotations[media.ANNOTATION_DEVICE] = device
    document = {
        "schemaVersion": 2,
        "mediaType": media.IMAGE_MANIFEST,
        "artifactType": media.ARTIFACT_TYPE,
        "config": {"mediaType": media.CONFIG, "size": len(config),
                   "digest": "sha256:" + hashlib.sha256(config).hexdigest()},
        "layers": [layer.descriptor() for layer in layers],
        "annotations": annotations,
    }
    return _canonical(document)


def index_document(manifests: list[tuple[bytes, str]], title: str) -> bytes:
    """An image index over (manifest body, device) pairs, each entry annotated with its
    device, in the order given."""
    entries = [{"mediaType": media.IMAGE_MANIFEST, "artifactType": media.ARTIFACT_TYPE,
                "digest": "sha256:" + hashlib.sha256(body).hexdigest(), "size": len(body),
                "annotations": {media.ANNOTATION_DEVICE: device}} for body, device in manifests]
    document = {"schemaVersion": 2, "mediaType": media.IMAGE_INDEX,
                "artifactType": media.ARTIFACT_TYPE, "manifests": entries,
                "annotations": {media.ANNOTATION_TITLE: title}}
    return _canonical(document)


def _json(body: bytes, where: str) -> dict[str, Any]:
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise FormatError(f"{where}: the manifest is not JSON ({exc})") from None
    if not isinstance(document, dict):
        raise FormatError(f"{where}: the manifest is not a JSON object")
    return document


def _descriptor(value: Any, where: str) -> tuple[str, int]:
    if not isinstance(value, dict):
        raise FormatError(f"{where} is not a descriptor (an object with a digest and a size)")
    digest, size = value.get("digest"), value.get("size")
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise FormatError(f"{where}: digest {digest!r} is not sha256:<64 hex digits>")
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise FormatError(f"{where}: size {size!r} is not a byte count")
    return digest, size


def parse_manifest(body: bytes, digest: str, where: str) -> Artifact:
    """The artifact |body| describes; FormatError for a manifest that is not one of modpack's
    (no library layer), or whose layers' names are not plain file names."""
    document = _json(body, where)
    if document.get("mediaType", media.IMAGE_MANIFEST) != media.IMAGE_MANIFEST:
        raise FormatError(f"{where}: a {document.get('mediaType')}, not an image manifest")
    config = document.get("config")
    _descriptor(config, f"{where}: config")
    assert isinstance(config, dict)
    raw_layers = document.get("layers")
    if not isinstance(raw_layers, list):
        raise FormatError(f"{where}: the manifest has no layers list")
    layers: list[Layer] = []
    for i, raw in enumerate(raw_layers):
        layer_digest, size = _descriptor(raw, f"{where}: layers[{i}]")
        annotations = raw.get("annotations") or {}
        title = annotations.get(media.ANNOTATION_TITLE) or annotations.get(
            media.ANNOTATION_FILEPATH)
        kind = str(raw.get("mediaType", ""))
        role = annotations.get(media.ANNOTATION_ROLE) or (
            "library" if kind == media.LIBRARY else "weights")
        if not isinstance(title, str) or not _SAFE_NAME.match(title) or title in ("..", "."):
            raise FormatError(f"{where}: layers[{i}] is named {title!r}, not a plain file name "
                              "(letters, digits, _ . + -): refused, as a path it could write "
                              "outside the folder it is pulled into")
        if any(layer.title == title for layer in layers):
            raise FormatError(f"{where}: two layers are named {title!r}")
        layers.append(Layer(layer_digest, size, kind, title, str(role)))
    if sum(layer.role == "library" for layer in layers) != 1:
        raise FormatError(f"{where}: not a modpack library (its layers hold no "
                          f"{media.LIBRARY} layer, or several): push it with `modpack push`")
    device = (document.get("annotations") or {}).get(media.ANNOTATION_DEVICE)
    return Artifact(digest, body, config, layers, device if isinstance(device, str) else None)


def parse_index(body: bytes, where: str) -> list[tuple[str, int, str | None]]:
    """(digest, size, device) of each manifest an image index lists."""
    document = _json(body, where)
    manifests = document.get("manifests")
    if not isinstance(manifests, list) or not manifests:
        raise FormatError(f"{where}: the image index lists no manifests")
    out = []
    for i, entry in enumerate(manifests):
        digest, size = _descriptor(entry, f"{where}: manifests[{i}]")
        device = (entry.get("annotations") or {}).get(media.ANNOTATION_DEVICE)
        out.append((digest, size, device if isinstance(device, str) else None))
    return out
