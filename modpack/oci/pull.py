"""``modpack pull oci://...`` (``modpack.pull``): the manifest a device needs (select.py),
then only the layers the store lacks, each checked against its digest while it streams in,
resumed where an interrupted download stopped (this process's retries, or a later pull), and
published into the store only once whole and verified (store.py). The OMS bundle that refers
to the manifest comes along, and is verified when keys are trusted. ``-o DIR`` then gives the
files their names in DIR (hard links to the store where it can, copies elsewhere), the
library last, each renamed into place whole."""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import FormatError, IncompatibleError, ModpackOSError, SignatureError
from . import media
from .artifact import Artifact, Layer, parse_index, parse_manifest
from .client import RegistryClient, RegistrySettings
from .oms import bundle_path, public_keys, verify_digests
from .progress import LayerProgress
from .reference import Reference, parse_reference
from .select import choose_variant, normalise_device
from .store import Store, disk_error

__all__ = ["Pulled", "pull"]

log = logging.getLogger("modpack.oci")
_CHUNK = 1 << 20


@dataclass
class Pulled:
    """What a pull left: the library and weight files' paths (in the store, or in the output
    folder), the manifest chosen and its device, the OMS bundle if any, and the bytes this
    pull downloaded (0 when the store had everything)."""

    reference: str
    manifest: str
    device: str | None
    library: Path
    title: str
    weights: dict[str, Path] = field(default_factory=dict)
    bundle: Path | None = None
    downloaded: int = 0
    verified_oms: bool = False


def pull(reference: str, *, device: str = "host", output: str | os.PathLike[str] | None = None,
         trusted_oms: Any = None, settings: RegistrySettings | None = None,
         store: str | os.PathLike[str] | None = None,
         progress: bool | None = None) -> Pulled:
    """Pull |reference| (``oci://HOST/REPO:TAG[@DIGEST]``) into the store, and into |output|
    (a folder) when given.

    device: ``host`` (this machine's devices), or ``cuda:sm_90``, ``rocm:gfx942``: which
        variant of an index to take; an explicit device must get code from the library
        (preflight's answer), else IncompatibleError.

    trusted_oms: EC public key(s): the manifest's OMS bundle must verify with one and cover
        the library and every weight file, else SignatureError (nothing is loaded).

    store: the store's folder (default: ``$MODPACK_CACHE`` or the user's cache folder).
    """
    ref = parse_reference(reference)
    device = normalise_device(device)
    keys = public_keys(trusted_oms) if trusted_oms is not None else None
    local = Store(store)
    local.ensure()
    record = local.read_ref(str(ref))
    if ref.digest is not None and record is None:
        record = _record_of_manifest(local, ref, device)
    if ref.digest is not None and record is not None and _complete(local, record) and (
            record.get("manifest") == ref.digest or (record.get("index") == ref.digest
                                                     and record.get("device_asked") == device)):
        pulled = _from_record(local, ref, record)  # content-addressed: no registry needed
    else:
        client = RegistryClient(ref, settings)
        try:
            pulled = _pull(client, local, ref, device, progress)
        except ModpackOSError as exc:
            if ref.digest is not None or record is None or not _complete(local, record) or \
                    "did not answer" not in str(exc):
                raise
            log.warning("%s; using what the store holds of %s (manifest %s, pulled %s)", exc,
                        ref, record.get("manifest"), record.get("pulled"))
            pulled = _from_record(local, ref, record)
    if keys is not None:
        if pulled.bundle is None:
            raise SignatureError(f"{ref} has no OMS signature (no bundle refers to its manifest "
                                 f"{pulled.manifest}): trusted_oms= refuses it; push it with "
                                 "--oms KEY")
        files = {pulled.title: (_digest_of(pulled.library), pulled.library)}
        files |= {name: (_digest_of(path), path) for name, path in pulled.weights.items()}
        verify_digests(files, pulled.bundle, keys)
        pulled.verified_oms = True
    if output is not None:
        pulled = _materialise(pulled, Path(output), local)
    return pulled


def _digest_of(path: Path) -> str:
    """A store blob's digest, from its name (blobs/sha256/<hex>)."""
    return f"sha256:{path.name}"


def _record_of_manifest(store: Store, ref: Reference, device: str) -> dict[str, Any] | None:
    """A record of the same repository whose manifest (or index, for |device|) is the one
    |ref| names by digest: what a pull by tag left serves a load by digest, offline."""
    prefix = f"oci://{ref.name}:"
    for record in store.refs():
        if not str(record.get("reference", "")).startswith(prefix):
            continue
        if record.get("manifest") == ref.digest or (
                record.get("index") == ref.digest and record.get("device_asked") == device):
            return record
    return None


def _complete(store: Store, record: dict[str, Any]) -> bool:
    return all(store.verified(layer["digest"]) for layer in record.get("layers", []))


def _from_record(store: Store, ref: Reference, record: dict[str, Any]) -> Pulled:
    layers = record["layers"]
    library = next(layer for layer in layers if layer["role"] == "library")
    bundle = record.get("bundle")
    return Pulled(str(ref), record["manifest"], record.get("device"),
                  store.blob_path(library["digest"]), library["title"],
                  {layer["title"]: store.blob_path(layer["digest"]) for layer in layers
                   if layer["role"] == "weights"},
                  store.blob_path(bundle) if bundle else None)


def _pull(client: RegistryClient, store: Store, ref: Reference, device: str,
          progress: bool | None) -> Pulled:
    body, media_type, digest = client.get_manifest(ref.manifest_reference)
    index_digest = None
    kind = media_type or str(json.loads(body).get("mediaType", ""))
    if kind == media.IMAGE_INDEX:
        index_digest = digest
        store.put_bytes(digest, body)
        entries = parse_index(body, f"{ref}")
        chosen = choose_variant(entries, device, str(ref))
        body, _, digest = client.get_manifest(chosen[0])
    artifact = parse_manifest(body, digest, f"{ref} (manifest {digest[:19]})")
    store.put_bytes(digest, body)
    config_digest = str(artifact.config["digest"])
    if not store.verified(config_digest):
        store.put_bytes(config_digest, _raw_blob(client, config_digest))
    downloaded = 0
    library = artifact.library
    downloaded += _fetch(client, store, library, progress)
    if device != "host":
        _check_device(store.blob_path(library.digest), device, ref, artifact)
    for layer in artifact.weights:
        downloaded += _fetch(client, store, layer, progress)
    bundle, bundle_manifest = _fetch_bundle(client, store, artifact)
    record = {"manifest": digest, "index": index_digest, "config": config_digest,
              "device": artifact.device, "device_asked": device,
              "layers": [{"digest": layer.digest, "size": layer.size, "title": layer.title,
                          "role": layer.role, "mediaType": layer.media_type}
                         for layer in artifact.layers],
              "bundle": bundle, "bundle_manifest": bundle_manifest,
              "pulled": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    store.write_ref(str(ref), record)
    pulled = _from_record(store, ref, record)
    pulled.downloaded = downloaded
    return pulled


def _raw_blob(client: RegistryClient, digest: str) -> bytes:
    response = client.request("GET", f"{client.base}/blobs/{digest}")
    data: bytes = response.content
    return data


def _check_device(library: Path, device: str, ref: Reference, artifact: Artifact) -> None:
    """The runtime's preflight of the pulled library for |device|: IncompatibleError when a
    module would have no code for it (before the weights are downloaded)."""
    from ..tools.preflight import preflight

    answer = preflight(library, device)
    if not answer["fits"]:
        raise IncompatibleError(f"{ref} (variant {artifact.device or 'for every device'}) has "
                                f"no code for {device}: {answer['reason']}")


def _fetch(client: RegistryClient, store: Store, layer: Layer, progress: bool | None) -> int:
    """Layer |layer| into the store unless it is there and verified; returns the bytes
    downloaded. The download goes to partial/<hex>.part, under a lock (a second process
    pulling the same layer waits, then finds it published), resuming what is there, and is
    renamed into blobs/ only when its digest matches."""
    if store.has(layer.digest, layer.size) and store.verified(layer.digest):
        log.info("pull %s: in the store (%s)", layer.title, layer.digest[:19])
        return 0
    partial = store.partial_path(layer.digest)
    try:
        f = open(partial, "a+b")
    except OSError as exc:
        raise disk_error(exc, store.root, f"the download of {layer.title}") from None
    with f:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX)
        if store.has(layer.digest, layer.size) and store.verified(layer.digest):
            return 0  # another process published it while this one waited
        return _download(client, store, layer, f, partial, progress)


def _download(client: RegistryClient, store: Store, layer: Layer, f: Any, partial: Path,
              progress: bool | None) -> int:
    h = hashlib.sha256()
    f.seek(0)
    offset = 0
    if os.fstat(f.fileno()).st_size > layer.size:
        f.truncate(0)
    while chunk := f.read(8 << 20):  # what an interrupted pull left: hashed, then resumed
        h.update(chunk)
        offset += len(chunk)
    received = 0
    failures = 0
    retries = client.settings.retries if client.settings.retries is not None else 5
    requests = client.requests
    with LayerProgress("pull", layer.title, layer.size, bar=progress, start=offset) as bar:
        while offset < layer.size:
            try:
                response = client.open_blob(layer.digest, offset)
                with response:
                    if response.status_code == 200 and offset:  # the range was ignored
                        f.truncate(0)
                        f.seek(0)
                        h, offset = hashlib.sha256(), 0
                    for chunk in response.iter_content(chunk_size=_CHUNK):
                        if offset + len(chunk) > layer.size:
                            break
                        f.write(chunk)
                        h.update(chunk)
                        offset += len(chunk)
                        received += len(chunk)
                        bar(len(chunk))
                if offset < layer.size:
                    raise ModpackOSError(f"the connection ended at byte {offset}")
            except (ModpackOSError, requests.exceptions.RequestException) as exc:
                if failures >= retries:
                    f.flush()
                    raise ModpackOSError(
                        f"pulling {layer.title} ({layer.digest}) from {client.reference.host} "
                        f"stopped at byte {offset} of {layer.size} ({exc}) after "
                        f"{retries + 1} attempts: nothing was published, and the "
                        f"{offset} bytes are kept to resume: pull again") from None
                client.backoff(failures, f"GET of {layer.title}", exc)
                failures += 1
            except OSError as exc:  # writing the partial file: a full disk
                raise disk_error(exc, store.root, f"the download of {layer.title}") from None
        try:
            f.flush()
            os.fsync(f.fileno())
        except OSError as exc:
            raise disk_error(exc, store.root, f"the download of {layer.title}") from None
    actual = "sha256:" + h.hexdigest()
    if offset != layer.size or actual != layer.digest:
        partial.unlink()
        raise FormatError(f"{client.reference.host} served {layer.title} as {offset} bytes "
                          f"whose digest is {actual}, but the manifest names {layer.digest} "
                          f"({layer.size} bytes): refused, nothing was published (the "
                          "registry's copy is damaged, or something between altered it)")
    store.publish(partial, layer.digest)
    return received


def _fetch_bundle(client: RegistryClient, store: Store,
                  artifact: Artifact) -> tuple[str | None, str | None]:
    """The newest OMS bundle referring to the artifact's manifest, into the store: (bundle's
    digest, its manifest's digest), or (None, None)."""
    referrers = client.referrers(artifact.digest, media.SIGNATURE_ARTIFACT_TYPE)
    if not referrers:
        return None, None
    descriptor = referrers[-1]
    body, _, digest = client.get_manifest(str(descriptor["digest"]))
    document = json.loads(body)
    layers = document.get("layers") or []
    if not layers or not isinstance(layers[0], dict):
        raise FormatError(f"{client.reference}: the OMS referrer {digest} holds no bundle")
    layer = layers[0]
    bundle = Layer(str(layer.get("digest")), int(layer.get("size", 0)), media.OMS_BUNDLE,
                   bundle_path(artifact.library.title).name, "oms-bundle")
    store.put_bytes(digest, body)
    _fetch(client, store, bundle, False)
    return bundle.digest, digest


def _materialise(pulled: Pulled, folder: Path, store: Store) -> Pulled:
    """The pulled files under their names in |folder|: weight files, the bundle, then the
    library, each made under a temporary name and renamed into place."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ModpackOSError(f"cannot make the folder {folder}: {exc.strerror}") from None
    placed: dict[str, Path] = {}
    files = [(name, path) for name, path in pulled.weights.items()]
    if pulled.bundle is not None:
        files.append((bundle_path(pulled.title).name, pulled.bundle))
    files.append((pulled.title, pulled.library))
    for name, source in files:
        target = folder / name
        temporary = folder / f".{name}.{os.getpid()}.tmp"
        try:
            try:
                os.link(source, temporary)
            except OSError:
                shutil.copyfile(source, temporary)
            os.replace(temporary, target)
        except OSError as exc:
            if temporary.exists():
                temporary.unlink()
            raise ModpackOSError(f"cannot write {target}: {exc.strerror or exc}") from None
        placed[name] = target
    library = placed[pulled.title]
    weights = {name: placed[name] for name in pulled.weights}
    bundle = placed.get(bundle_path(pulled.title).name)
    return Pulled(pulled.reference, pulled.manifest, pulled.device, library, pulled.title,
                  weights, bundle, pulled.downloaded, pulled.verified_oms)
