"""OpenSSF Model Signing (OMS): a sigstore bundle over the library and its weight files, as
the ``model_signing`` tool writes and verifies it, with an elliptic-curve key (its ``key``
method: P-256, P-384 or P-521; no Sigstore account, no network).

OMS signs a *folder*: a manifest of each file's name (relative to the folder) and digest, in
an in-toto statement signed in a DSSE envelope. modpack's model is the library and the weight
files it refers to, published in one folder (where a load finds them), so that is what is
signed: ``modpack sign deploy.so --oms key.pem`` writes ``deploy.so.sig`` beside the library,
covering ``deploy.so`` and its weight files; other files of the folder are recorded as ignored,
so ``model_signing verify key FOLDER --signature FOLDER/deploy.so.sig --public_key pub.pem``
verifies it unchanged. A load with ``trusted_oms=`` verifies such a bundle before ``dlopen``:
the signature by a trusted key, then every file the load will map against the digest the
bundle gives it (a file the bundle does not cover is refused). From the store, the layers'
digests, checked as they were downloaded (and stamped), stand for the files: a bundle whose
files are hashed with SHA-256 whole (the ``files`` serialization, the tool's default) is
checked without reading the weights again.
"""

from __future__ import annotations

import base64
import json
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import ArgumentError, MissingFileError, SignatureError
from ..extras import import_extra

__all__ = ["bundle_path", "public_keys", "sign_files", "sign_library_oms", "verify_digests",
           "verify_files"]

_FEATURE = "OpenSSF model signing (--oms, trusted_oms=)"
_KEY_HELP = ("OMS signs with an elliptic-curve key, P-256, P-384 or P-521 (`openssl ecparam "
             "-name prime256v1 -genkey -noout -out key.pem`, public half: `openssl ec -in "
             "key.pem -pubout -out key.pub.pem`); modpack's in-file signatures (--key, "
             "trusted_keys=) are the Ed25519 ones")


def bundle_path(library: str | os.PathLike[str]) -> Path:
    """Where the OMS bundle of |library| is kept: beside it, named ``<library>.sig``."""
    path = Path(library)
    return path.with_name(path.name + ".sig")


def public_keys(trusted: Any) -> list[Path]:
    """``trusted_oms=`` as a list of public key files: one path, or several."""
    if isinstance(trusted, (str, os.PathLike)):
        items = [trusted]
    else:
        try:
            items = list(trusted)
        except TypeError:
            raise ArgumentError(f"trusted_oms takes the path of a PEM public key (or a list of "
                                f"them), not {type(trusted).__name__}") from None
    keys = []
    for item in items:
        if not isinstance(item, (str, os.PathLike)):
            raise ArgumentError(f"trusted_oms takes paths of PEM public keys, not "
                                f"{type(item).__name__}")
        path = Path(item)
        if not path.is_file():
            raise MissingFileError(f"no such OMS public key: {path}")
        keys.append(path)
    if not keys:
        raise ArgumentError("trusted_oms names no key: give the path of a PEM public key")
    return keys


def _check_key(path: Path, private: bool) -> None:
    """ArgumentError unless |path| holds an EC key of a curve OMS takes."""
    serialization = import_extra("cryptography.hazmat.primitives.serialization", "oci",
                                 _FEATURE)
    ec = import_extra("cryptography.hazmat.primitives.asymmetric.ec", "oci", _FEATURE)
    if not path.is_file():
        raise MissingFileError(f"no such OMS key: {path}")
    data = path.read_bytes()
    try:
        key = (serialization.load_pem_private_key(data, None) if private
               else serialization.load_pem_public_key(data))
    except (ValueError, TypeError) as exc:
        raise ArgumentError(f"{path} is not a PEM {'private' if private else 'public'} key "
                            f"({exc}): {_KEY_HELP}") from None
    public = key.public_key() if private else key
    if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name not in (
            "secp256r1", "secp384r1", "secp521r1"):
        raise ArgumentError(f"{path} is a {type(public).__name__.replace('PublicKey', '')} "
                            f"key: {_KEY_HELP}")


def sign_files(files: Iterable[Path], key: str | os.PathLike[str],
               bundle: str | os.PathLike[str] | None = None) -> Path:
    """Sign |files| (the library first, then its weight files; all in one folder) with the
    EC private key |key| into an OMS bundle (default: ``<library>.sig`` beside it). Every
    other entry of the folder is recorded as ignored, so the model_signing tool verifies the
    folder as it is. Returns the bundle's path."""
    paths = [Path(f) for f in files]
    folder = paths[0].resolve().parent
    for path in paths:
        if path.resolve().parent != folder:
            raise ArgumentError(f"OMS signs the files of one folder: {path} is not in {folder} "
                                f"with {paths[0].name}; put the weight files beside the library")
        if not path.is_file():
            raise MissingFileError(f"no such file to sign: {path}")
    out = Path(bundle) if bundle is not None else bundle_path(paths[0])
    key_path = Path(key)
    _check_key(key_path, private=True)
    hashing = import_extra("model_signing.hashing", "oci", _FEATURE)
    signing = import_extra("model_signing.signing", "oci", _FEATURE)
    names = {p.name for p in paths}
    ignored = sorted(entry.name for entry in folder.iterdir() if entry.name not in names)
    if out.resolve().parent == folder and out.name not in ignored:
        ignored.append(out.name)
    config = hashing.Config().use_file_serialization(hashing_algorithm="sha256")
    config.set_ignored_paths(paths=ignored, ignore_git_paths=True)
    temporary = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        signing.Config().set_hashing_config(config).use_elliptic_key_signer(
            private_key=key_path).sign(folder, temporary)
        os.replace(temporary, out)
    except (ValueError, OSError) as exc:
        raise SignatureError(f"OMS signing of {paths[0]} failed: {exc}") from None
    finally:
        if temporary.exists():
            temporary.unlink()
    return out


def sign_library_oms(library: str | os.PathLike[str], key: str | os.PathLike[str], *,
                     weights: Iterable[str | os.PathLike[str]] | None = None) -> Path:
    """``modpack sign LIBRARY --oms KEY``: an OMS bundle beside |library| over it and its
    weight files (|weights|, else those it refers to, beside it, where a load finds them)."""
    from ..tools.inspection import inspect_library

    path = Path(library)
    if not path.is_file():
        raise MissingFileError(f"no such library: {path}")
    if weights is not None:
        files = [Path(w) for w in weights]
    else:
        report = inspect_library(path)
        if report.get("kind") == "weight file":
            raise ArgumentError(f"{path} is a weight file: sign the library that refers to it "
                                "with --oms (it covers the library and its weight files)")
        names = sorted({m["contents"]["file"] for m in report.get("modules", [])
                        if isinstance(m.get("contents"), dict) and "file" in m["contents"]})
        files = [path.parent / name for name in names]
    return sign_files([path, *files], key)


def _payload(bundle: Path) -> dict[str, Any]:
    """The in-toto statement inside a bundle (read after its signature was verified)."""
    try:
        document = json.loads(bundle.read_bytes())
        payload: dict[str, Any] = json.loads(base64.b64decode(
            document["dsseEnvelope"]["payload"]))
        return payload
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SignatureError(f"{bundle} is not an OMS bundle (a sigstore bundle with a DSSE "
                             f"envelope): {exc}") from None


def _resources(bundle: Path) -> dict[str, tuple[str, str]]:
    """{file name: (algorithm, hex digest)} the bundle's statement lists."""
    predicate = _payload(bundle).get("predicate") or {}
    out = {}
    for resource in predicate.get("resources", []):
        if isinstance(resource, dict) and isinstance(resource.get("name"), str):
            out[resource["name"]] = (str(resource.get("algorithm")),
                                     str(resource.get("digest")))
    return out


def verify_files(files: Iterable[Path], bundle: Path, keys: list[Path]) -> None:
    """Check, before any of them is loaded, that |bundle| is an OMS signature by one of
    |keys| over |files| (one folder's): the model_signing tool's verification of the folder
    (files the bundle does not list are left aside), then that every one of |files| is
    among those it lists. SignatureError otherwise, saying which."""
    paths = [Path(f) for f in files]
    if not bundle.is_file():
        raise SignatureError(f"{paths[0]} has no OMS signature: trusted_oms= needs the bundle "
                             f"{bundle} (`modpack sign {paths[0].name} --oms KEY` writes it)")
    for key in keys:
        _check_key(key, private=False)
    verifying = import_extra("model_signing.verifying", "oci", _FEATURE)
    folder = paths[0].resolve().parent
    for path in paths[1:]:
        if path.resolve().parent != folder:
            raise SignatureError(f"{path}: an OMS signature covers the files of the library's "
                                 f"folder ({folder}), and this weight file is elsewhere: put it "
                                 "beside the library, as it was signed")
    failures = []
    for key in keys:
        try:
            verifying.Config().use_elliptic_key_verifier(public_key=key).set_ignore_unsigned_files(
                True).verify(folder, bundle)
            break
        except (ValueError, OSError, KeyError) as exc:
            failures.append(f"{key}: {exc}")
    else:
        raise SignatureError(f"{paths[0]}: the OMS signature {bundle} does not hold for any "
                             f"trusted key ({'; '.join(failures)}): refused before loading")
    listed = _resources(bundle)
    for path in paths:
        if path.name not in listed:
            raise SignatureError(f"{path}: the OMS signature {bundle} does not cover this file "
                                 f"(it lists {', '.join(sorted(listed)) or 'nothing'}): sign "
                                 "the library with its weight files")


def verify_digests(files: dict[str, tuple[str, Path]], bundle: Path,
                   keys: list[Path]) -> None:
    """Check that |bundle| is an OMS signature by one of |keys| whose manifest gives each
    file of |files| ({name: ("sha256:<hex>", path)}, digests already checked, as a store's
    layers are) that digest. A bundle that hashes otherwise than whole files with SHA-256 is checked
    by the model_signing tool's own verification over the files, linked into a folder under
    their names."""
    for key in keys:
        _check_key(key, private=False)
    failures = []
    for key in keys:
        try:
            manifest = _verified_manifest(bundle, key)
        except (ValueError, OSError, KeyError) as exc:
            failures.append(f"{key}: {exc}")
            continue
        kind = manifest.serialization_type
        if kind.get("method") != "files" or kind.get("hash_type") != "sha256":
            return _verify_linked(files, bundle, key)
        listed = {str(rd.identifier): f"sha256:{rd.digest.digest_hex}"
                  for rd in manifest.resource_descriptors()}
        for name, (digest, _) in files.items():
            if name not in listed:
                raise SignatureError(f"{name}: the OMS signature does not cover this file (it "
                                     f"lists {', '.join(sorted(listed)) or 'nothing'})")
            if listed[name] != digest:
                raise SignatureError(f"{name} is not the file the OMS signature covers: its "
                                     f"digest is {digest}, the signature's {listed[name]}: "
                                     "refused before loading")
        return None
    raise SignatureError(f"the OMS signature does not hold for any trusted key "
                         f"({'; '.join(failures)}): refused before loading")


def _verified_manifest(bundle: Path, key: Path) -> Any:
    """The model manifest of |bundle|, once its signature by |key| is verified (the
    model_signing tool's verifier for key-signed bundles)."""
    ec_key = import_extra("model_signing._signing.sign_ec_key", "oci", _FEATURE)
    sigstore_pb = import_extra("model_signing._signing.sign_sigstore_pb", "oci", _FEATURE)
    signature = sigstore_pb.Signature.read(bundle)
    return ec_key.Verifier(key).verify(signature)


def _verify_linked(files: dict[str, tuple[str, Path]], bundle: Path, key: Path) -> None:
    """The model_signing tool's verification over hard links of the store's files, named as
    the bundle names them (in a folder beside them: a link changes no stamp)."""
    first = next(iter(files.values()))[1]
    with tempfile.TemporaryDirectory(dir=first.parent.parent.parent) as folder:
        paths = []
        for name, (_, path) in files.items():
            link = Path(folder) / name
            os.link(path, link)
            paths.append(link)
        verify_files(paths, bundle, [key])
