"""``modpack push deploy.so oci://HOST/REPO:TAG`` (``modpack.push``): a library and its
weight files as an OCI artifact (artifact.py), in device variants on request, with OMS
bundles as referrers. Blobs the registry has are not sent again (a weight file shared by
tags, variants or models is uploaded once); the tag is written last, so an interrupted push
publishes nothing, and pushing again resumes with what the registry already holds."""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, FormatError, MissingFileError, NotFoundError
from ..files.scratch import new_workspace
from ..tools.verdict import NOT_DAMAGE
from . import media
from .artifact import Layer, config_document, describe_file, index_document, manifest_document
from .client import RegistryClient, RegistrySettings, _canonical
from .oms import bundle_path, sign_files
from .progress import LayerProgress
from .reference import parse_reference

__all__ = ["PushResult", "push"]

log = logging.getLogger("modpack.oci")
_EMPTY = b"{}"


@dataclass
class PushResult:
    """What a push published: the reference, the digest its tag now names (an index for
    variants), each manifest by device, and the bytes uploaded (blobs the registry had are
    not)."""

    reference: str
    digest: str
    manifests: dict[str, str] = field(default_factory=dict)
    uploaded_bytes: int = 0
    skipped_layers: int = 0
    bundles: int = 0


def push(library: str | os.PathLike[str], target: str, *,
         weights: list[str | os.PathLike[str]] | None = None,
         variants: str | list[str] | None = None,
         oms_key: str | os.PathLike[str] | None = None,
         settings: RegistrySettings | None = None,
         progress: bool | None = None) -> PushResult:
    """Push |library| (and its weight files: those it refers to, found beside it, or
    |weights|) to |target| (``oci://HOST/REPO:TAG``).

    variants: devices (``"sm_80,sm_90,gfx942"`` or a list) to push one manifest each for, in
        an image index: each a ``slim`` of the library to that device's code, the weight
        layers shared.

    oms_key: an EC private key: each manifest's files are signed with OpenSSF model signing
        and the bundle pushed as a referrer of the manifest. Without it, a bundle beside the
        library (``deploy.so.sig``, from ``modpack sign --oms``) is pushed with a manifest of
        the library as it is (not with variants, which it does not cover).

    progress: a bar per layer (None: when stderr is a terminal), else INFO log lines.
    """
    from ..tools.inspection import inspect_library
    from ..tools.slim.keep import device_strings

    ref = parse_reference(target)
    if ref.digest is not None:
        raise ArgumentError(f"{target}: push to a tag (oci://HOST/REPO:TAG); the digest is "
                            "the registry's to give")
    source = Path(library)
    if not source.is_file():
        raise MissingFileError(f"no such library: {source}")
    report = inspect_library(source)
    if report.get("kind") == "weight file":
        raise ArgumentError(f"{source} is a weight file: push the library that refers to it "
                            "(its weight files go with it)")
    loads = report.get("loads")
    if loads is not None and not loads["ok"] and loads["stage"] not in NOT_DAMAGE:
        raise FormatError(f"{source} would not load ({loads['message']}): it is not pushed")
    weight_layers = _weight_layers(source, report, weights)
    devices = device_strings(variants) if variants else [None]
    client = RegistryClient(ref, settings)
    result = PushResult(str(ref), "")
    workspace = new_workspace("push")
    try:
        manifests: list[tuple[bytes, str | None, list[Layer], bytes]] = []
        for i, device in enumerate(devices):
            lib_path = source
            if device is not None:
                from ..tools.slim import slim_library

                lib_path = workspace / str(i) / source.name
                lib_path.parent.mkdir()
                slim_library(source, lib_path, [device])
                report = inspect_library(lib_path)
            lib_layer = describe_file(lib_path, source.name, "library", media.LIBRARY)
            layers = [lib_layer, *weight_layers]
            config = config_document(report, source.name, layers)
            manifests.append((manifest_document(config, layers, device), device, layers,
                              config))
        bundles = _bundles(source, manifests, oms_key, variants is not None, workspace)
        _upload_all(client, manifests, bundles, result, progress)
        for body, device, _, _ in manifests:
            digest = _digest(body)
            client.put_manifest(digest, body, media.IMAGE_MANIFEST)
            result.manifests[device or "all"] = digest
        for body, (bundle, bundle_layer) in zip([m[0] for m in manifests], bundles):
            if bundle is not None and bundle_layer is not None:
                _push_referrer(client, body, bundle_layer)
                result.bundles += 1
        if variants:
            top = index_document([(m[0], str(m[1])) for m in manifests], source.name)
            client.put_manifest(ref.tag, top, media.IMAGE_INDEX)
        else:
            top = manifests[0][0]
            client.put_manifest(ref.tag, top, media.IMAGE_MANIFEST)
        result.digest = _digest(top)
        result.uploaded_bytes = client.bytes_sent
        log.info("pushed %s (%s): %d bytes uploaded, %d layers the registry had", ref,
                 result.digest, result.uploaded_bytes, result.skipped_layers)
        return result
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


def _digest(body: bytes) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(body).hexdigest()


def _weight_layers(source: Path, report: dict[str, Any],
                   weights: list[str | os.PathLike[str]] | None) -> list[Layer]:
    """The layers of the weight files: |weights| as given, else each file the library refers
    to, found beside it (as a load finds it)."""
    if weights is not None:
        paths = [Path(w) for w in weights]
    else:
        names = sorted({m["contents"]["file"] for m in report.get("modules", [])
                        if isinstance(m.get("contents"), dict) and "file" in m["contents"]})
        paths = [source.parent / name for name in names]
        for path in paths:
            if not path.is_file():
                raise NotFoundError(f"{source} refers to the weight file {path.name}, which is "
                                    f"not beside it ({path}): put it there or give its path "
                                    "(--weights)")
    layers: list[Layer] = []
    for path in paths:
        if not path.is_file():
            raise MissingFileError(f"no such weight file: {path}")
        if path.name == source.name or any(layer.title == path.name for layer in layers):
            raise ArgumentError(f"two files of the artifact would be named {path.name}")
        kind = media.WEIGHTS if _is_modpack_weights(path) else media.WEIGHTS_FOREIGN
        layers.append(describe_file(path, path.name, "weights", kind))
    return layers


def _is_modpack_weights(path: Path) -> bool:
    from ..format.signatures import is_weight_file

    return bool(is_weight_file(path))


def _bundles(source: Path, manifests: list[tuple[bytes, str | None, list[Layer], bytes]],
             key: str | os.PathLike[str] | None, variants: bool,
             workspace: Path) -> list[tuple[Path | None, Layer | None]]:
    """Per manifest, its OMS bundle and the bundle's layer (None, None: unsigned)."""
    out: list[tuple[Path | None, Layer | None]] = []
    beside = bundle_path(source)
    for i, (_, _, layers, _) in enumerate(manifests):
        if key is not None:
            folder = workspace / f"sign-{i}"
            folder.mkdir()
            files = []
            for layer in layers:
                assert layer.path is not None
                files.append(_link_or_copy(layer.path, folder / layer.title))
            bundle = sign_files(files, key)
        elif beside.is_file() and not variants:
            _check_bundle_matches(beside, layers)
            bundle = beside
        else:
            out.append((None, None))
            continue
        title = bundle_path(layers[0].title).name
        out.append((bundle, describe_file(bundle, title, "oms-bundle", media.OMS_BUNDLE)))
    return out


def _check_bundle_matches(bundle: Path, layers: list[Layer]) -> None:
    """Refuse to push a bundle that lists other digests for these files (signed before the
    library or a weight file changed)."""
    from .oms import _resources

    listed = _resources(bundle)
    for layer in layers:
        algorithm, digest = listed.get(layer.title, ("", ""))
        if algorithm == "sha256" and digest and f"sha256:{digest}" != layer.digest:
            raise ArgumentError(f"the OMS bundle {bundle} was made for another {layer.title} "
                                "(its digest differs): sign again (`modpack sign "
                                f"{layers[0].title} --oms KEY`) or remove it")


def _link_or_copy(source: Path, target: Path) -> Path:
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return target


def _upload_all(client: RegistryClient,
                manifests: list[tuple[bytes, str | None, list[Layer], bytes]],
                bundles: list[tuple[Path | None, Layer | None]], result: PushResult,
                progress: bool | None) -> None:
    """Every blob the manifests and bundles name, each once, the registry's skipped."""
    done: set[str] = set()
    blobs: list[tuple[Layer, Path | bytes]] = []
    for (_, _, layers, config), (_, bundle_layer) in zip(manifests, bundles):
        for layer in layers:
            assert layer.path is not None
            blobs.append((layer, layer.path))
        blobs.append((Layer(_digest(config), len(config), media.CONFIG, "config", "config"),
                      config))
        if bundle_layer is not None:
            assert bundle_layer.path is not None
            blobs.append((bundle_layer, bundle_layer.path))
            blobs.append((Layer(_digest(_EMPTY), 2, media.EMPTY_CONFIG, "empty", "config"),
                          _EMPTY))
    for layer, content in blobs:
        if layer.digest in done:
            continue
        done.add(layer.digest)
        if isinstance(content, bytes):
            if not client.blob_exists(layer.digest):
                _upload_bytes(client, layer.digest, content)
            continue
        if client.blob_exists(layer.digest):
            result.skipped_layers += 1
            log.info("push %s: the registry has it (%s)", layer.title, layer.digest[:19])
            continue
        with LayerProgress("push", layer.title, layer.size, bar=progress) as bar:
            client.upload_blob(content, layer.digest, layer.size, bar, check=False)


def _upload_bytes(client: RegistryClient, digest: str, data: bytes) -> None:
    from .client import _with_digest

    location = client._start_upload()
    client.request("PUT", _with_digest(location, digest), data=data, ok=(201,),
                   headers={"Content-Type": "application/octet-stream",
                            "Content-Length": str(len(data))})
    client.bytes_sent += len(data)


def _push_referrer(client: RegistryClient, subject_body: bytes, bundle: Layer) -> None:
    """The bundle's manifest (an artifact whose subject is the manifest it signs), then its
    entry in the referrers fallback index where the registry keeps none itself."""
    subject: dict[str, Any] = {"mediaType": media.IMAGE_MANIFEST, "digest": _digest(subject_body),
               "size": len(subject_body)}
    document: dict[str, Any] = {
        "schemaVersion": 2,
        "mediaType": media.IMAGE_MANIFEST,
        "artifactType": media.SIGNATURE_ARTIFACT_TYPE,
        "config": {"mediaType": media.EMPTY_CONFIG, "digest": _digest(_EMPTY), "size": 2},
        "layers": [bundle.descriptor()],
        "subject": subject,
        "annotations": {media.ANNOTATION_TITLE: bundle.title},
    }
    body = _canonical(document)
    response = client.put_manifest(_digest(body), body, media.IMAGE_MANIFEST)
    descriptor = {"mediaType": media.IMAGE_MANIFEST, "digest": _digest(body),
                  "size": len(body), "artifactType": media.SIGNATURE_ARTIFACT_TYPE,
                  "annotations": document["annotations"]}
    client.add_referrer(subject["digest"], descriptor,
                        indexed_by_registry=bool(response.headers.get("OCI-Subject")))
