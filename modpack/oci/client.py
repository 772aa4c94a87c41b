"""A registry's distribution API, spoken through oras-py (the ORAS project's Python client):
its session, its authentication (a Bearer token fetched with the Docker ``config.json``
credentials, or HTTP basic auth, as the registry's challenge asks) and its TLS settings (a
custom CA bundle). What oras-py leaves out is added here over its session, never as HTTP of
our own: retries with exponential backoff (oras's own retry waits minutes and knows no
resume), chunked uploads that resume where the registry says an interrupted one stopped,
ranged blob reads (a download resumes), and referrers (the API, or the OCI 1.1 tag schema on
registries without it, as the CNCF distribution registry 2.8).

Settings come from arguments or the environment: ``MODPACK_OCI_PLAIN_HTTP`` (``1``, or a
comma-separated list of hosts: plain HTTP, for a registry on a trusted network),
``MODPACK_OCI_CA`` (a PEM bundle of CAs to trust, for a registry with a private CA),
``DOCKER_CONFIG`` (the folder of Docker's ``config.json``, as Docker reads it; default
``~/.docker``), ``MODPACK_OCI_RETRIES`` (attempts after the first; default 5).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import (
    ArgumentError,
    FormatError,
    ModpackOSError,
    NotFoundError,
    SignatureError,
)
from ..extras import import_extra
from . import media
from .reference import Reference

__all__ = ["RegistryClient", "RegistrySettings"]

log = logging.getLogger("modpack.oci")
_TRANSIENT_STATUS = (429, 500, 502, 503, 504)
_MANIFEST_LIMIT = 4 << 20  # the distribution spec's recommended limit


@dataclass
class RegistrySettings:
    """How to reach registries. Each field left None is read from the environment (see the
    module's docstring)."""

    plain_http: bool | None = None
    ca_file: str | None = None
    docker_config: str | None = None
    credentials: tuple[str, str] | None = None
    retries: int | None = None
    backoff: float = 0.25  # seconds before the first retry; doubled for each next one
    chunk_size: int = 64 << 20  # bytes per PATCH of a chunked upload
    timeout: float = 60.0  # seconds without a byte from the registry before a retry
    extra: dict[str, Any] = field(default_factory=dict)

    def resolved(self, host: str) -> RegistrySettings:
        """A copy with every environment-dependent field filled for |host|."""
        plain = self.plain_http
        if plain is None:
            value = os.environ.get("MODPACK_OCI_PLAIN_HTTP", "").strip()
            plain = value in ("1", "true", "yes") or host in {h.strip() for h in
                                                              value.split(",") if h.strip()}
        ca = self.ca_file or os.environ.get("MODPACK_OCI_CA") or None
        if ca is not None and not os.path.isfile(ca):
            raise ArgumentError(f"the CA bundle {ca} (ca_file= or MODPACK_OCI_CA) is not a file: "
                                "give the PEM file of the registry's CA")
        config = self.docker_config
        if config is None:
            folder = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
            config = os.path.join(folder, "config.json")
        retries = self.retries
        if retries is None:
            text = os.environ.get("MODPACK_OCI_RETRIES", "5")
            try:
                retries = max(0, int(text))
            except ValueError:
                raise ArgumentError(f"MODPACK_OCI_RETRIES={text!r} is not a whole number of "
                                    "retries (e.g. 5)") from None
        return RegistrySettings(plain, ca, config, self.credentials, retries, self.backoff,
                                self.chunk_size, self.timeout, dict(self.extra))


class _Transient(ModpackOSError):
    """A failure worth another attempt (connection lost, timeout, 5xx, 429)."""


class RegistryClient:
    """One repository of one registry (|reference|'s host and repository)."""

    def __init__(self, reference: Reference, settings: RegistrySettings | None = None) -> None:
        self.reference = reference
        self.settings = (settings or RegistrySettings()).resolved(reference.host)
        self.scheme = "http" if self.settings.plain_http else "https"
        self.base = f"{self.scheme}://{reference.host}/v2/{reference.repository}"
        self.requests = import_extra("requests", "oci", "pulling from and pushing to registries")
        self._oras: Any = None
        self.bytes_sent = 0
        self.bytes_received = 0

    # ---- the session ------------------------------------------------------------------------

    def _registry(self) -> Any:
        """oras-py's Registry for this host, with the auth backend the registry's challenge
        asks for and the credentials found for it; made on first use."""
        if self._oras is not None:
            return self._oras
        provider = import_extra("oras.provider", "oci", "pulling from and pushing to registries")
        verify: bool | str = self.settings.ca_file or True
        challenge = self._challenge(verify)
        backend = "basic" if challenge.lower().startswith("basic") else "token"
        registry = provider.Registry(hostname=self.reference.host,
                                     insecure=self.scheme == "http", tls_verify=verify,
                                     auth_backend=backend)
        registry.session = registry.auth.session = _session(self.requests,
                                                            self.settings.timeout,
                                                            registry.session)
        self._credentials(registry)
        if backend == "basic" and challenge and not getattr(registry.auth, "_basic_auth", None):
            raise SignatureError(
                f"registry {self.reference.host} asks for a user name and password, and none "
                f"was found for it: log in (`docker login {self.reference.host}`, which writes "
                f"{self.settings.docker_config}) or pass credentials=(user, password)")
        self._oras = registry
        return registry

    def _challenge(self, verify: bool | str) -> str:
        """The WWW-Authenticate challenge of ``GET /v2/`` ('' when the registry is open)."""
        url = f"{self.scheme}://{self.reference.host}/v2/"
        response = self._attempts(lambda: self.requests.get(url, verify=verify,
                                                            timeout=self.settings.timeout),
                                  f"GET {url}")
        return str(response.headers.get("WWW-Authenticate", ""))

    def _credentials(self, registry: Any) -> None:
        if self.settings.credentials is not None:
            user, password = self.settings.credentials
            registry.auth.set_basic_auth(user, password)
            return
        config = self.settings.docker_config
        if config and os.path.isfile(config):
            try:
                registry.auth.load_configs(registry.get_container(self.reference.name),
                                           configs=[config])
            except (ValueError, OSError, KeyError) as exc:
                raise ArgumentError(f"cannot read the registry credentials in {config}: "
                                    f"{exc}; fix or remove the file") from None

    def _headers(self, headers: dict[str, str] | None) -> dict[str, str]:
        """|headers| plus a Basic authorization sent up front (oras's basic backend waits
        for a 401 on every request, which a streamed body would have to be sent twice for)."""
        out = dict(headers or {})
        registry = self._registry()
        if type(registry.auth).__name__ == "BasicAuth" and getattr(registry.auth, "_basic_auth",
                                                                   None):
            out.update(registry.auth.get_auth_header())
        return out

    # ---- requests ---------------------------------------------------------------------------

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                data: Any = None, stream: bool = False, ok: tuple[int, ...] = (200,),
                retry: bool = True) -> Any:
        """One request through oras's session and auth, retried with backoff while it fails
        for a reason that may pass (``retry=True``); a status outside |ok| raises the error
        that says what it means (404: NotFoundError, 401/403: SignatureError)."""
        registry = self._registry()
        send = registry.do_request.__wrapped__  # oras's request without oras's retry loop

        def attempt() -> Any:
            response = send(registry, url, method, data, self._headers(headers), None, stream)
            if response.status_code in _TRANSIENT_STATUS:
                response.close()
                raise _Transient(f"{response.status_code} {response.reason}")
            return response

        response = (self._attempts(attempt, f"{method} {url}") if retry
                    else self._once(attempt, f"{method} {url}"))
        if response.status_code not in ok:
            raise self._status_error(method, url, response)
        return response

    def _once(self, call: Callable[[], Any], what: str) -> Any:
        try:
            return call()
        except self.requests.exceptions.SSLError as exc:
            raise self._tls_error(exc) from None
        except (self.requests.exceptions.ConnectionError, self.requests.exceptions.Timeout,
                self.requests.exceptions.ChunkedEncodingError) as exc:
            raise _Transient(f"{type(exc).__name__}: {exc}") from exc

    def _attempts(self, call: Callable[[], Any], what: str) -> Any:
        retries = self.settings.retries if self.settings.retries is not None else 5
        number = 0
        while True:
            try:
                return self._once(call, what)
            except _Transient as exc:
                if number >= retries:
                    raise ModpackOSError(
                        f"registry {self.reference.host} did not answer {what} after "
                        f"{retries + 1} attempts ({exc}): check that it runs and is reachable "
                        f"(MODPACK_OCI_RETRIES sets the attempts)") from None
                self.backoff(number, what, exc)
                number += 1

    def backoff(self, number: int, what: str, why: object) -> None:
        """Wait before attempt |number| + 2: backoff x 2^number seconds (capped at 10)."""
        delay = min(10.0, self.settings.backoff * (2 ** number))
        log.info("%s failed (%s); retrying in %.2f s", what, why, delay)
        time.sleep(delay)

    def _tls_error(self, exc: Exception) -> ModpackOSError:
        return ModpackOSError(
            f"TLS with registry {self.reference.host} failed ({exc}): if it has a private CA, "
            "give its certificate (ca_file=, --ca or MODPACK_OCI_CA); if it speaks plain HTTP, "
            "say so (plain_http=True, --plain-http or MODPACK_OCI_PLAIN_HTTP)")

    def _status_error(self, method: str, url: str, response: Any) -> Exception:
        detail = _registry_message(response)
        where = f"{method} {url.split('?')[0]}: {response.status_code} {response.reason}"
        if response.status_code == 404:
            return NotFoundError(f"registry {self.reference.host} has no {url.split('/v2/')[-1]}"
                                 f" ({where}{detail}): check the repository, tag or digest")
        if response.status_code in (401, 403):
            return SignatureError(
                f"registry {self.reference.host} refused access ({where}{detail}): log in "
                f"(`docker login {self.reference.host}`, read from "
                f"{self.settings.docker_config}) or pass credentials=, with rights to "
                f"{self.reference.repository}")
        return ModpackOSError(f"registry {self.reference.host}: {where}{detail}")

    # ---- blobs ------------------------------------------------------------------------------

    def blob_exists(self, digest: str) -> bool:
        response = self.request("HEAD", f"{self.base}/blobs/{digest}", ok=(200, 404))
        return bool(response.status_code == 200)

    def open_blob(self, digest: str, offset: int = 0) -> Any:
        """A streaming response of blob |digest| from byte |offset| (206, or 200 when the
        registry ignores the range: the caller then starts again at 0)."""
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        return self.request("GET", f"{self.base}/blobs/{digest}", headers=headers, stream=True,
                            ok=(200, 206))

    def upload_blob(self, path: Path, digest: str, size: int,
                    progress: Callable[[int], None], check: bool = True) -> bool:
        """Upload the file at |path| as blob |digest| unless the registry has it (False then).
        A blob up to chunk_size goes in one PUT; a larger one in PATCHes of chunk_size, and
        when one fails the upload continues where the registry says it got to (a new upload
        when it lost the session), with backoff, until retries run out without progress.
        |check| False: the caller knows the registry lacks it (no HEAD first)."""
        if check and self.blob_exists(digest):
            return False
        location = self._start_upload()
        with open(path, "rb") as f:
            if size <= self.settings.chunk_size:
                body = f.read()
                self.request("PUT", _with_digest(location, digest), data=body, ok=(201,),
                             headers={"Content-Type": "application/octet-stream",
                                      "Content-Length": str(len(body))})
                self.bytes_sent += len(body)
                progress(len(body))
                return True
            offset, failures = 0, 0
            retries = self.settings.retries if self.settings.retries is not None else 5
            while offset < size:
                f.seek(offset)
                chunk = f.read(min(self.settings.chunk_size, size - offset))
                try:
                    response = self.request(
                        "PATCH", location, data=chunk, ok=(202,), retry=False,
                        headers={"Content-Type": "application/octet-stream",
                                 "Content-Range": f"{offset}-{offset + len(chunk) - 1}",
                                 "Content-Length": str(len(chunk))})
                except ModpackOSError as exc:  # a _Transient among them
                    if failures >= retries:
                        raise ModpackOSError(
                            f"registry {self.reference.host}: uploading {digest} stopped at "
                            f"byte {offset} of {size} ({exc}) after {retries + 1} attempts: "
                            "nothing was published; push again to resume") from None
                    self.backoff(failures, f"PATCH of {digest}", exc)
                    failures += 1
                    location, resumed = self._resume_upload(location)
                    progress(resumed - offset)
                    offset = resumed
                    continue
                failures = 0
                location = _location(response, self.reference, self.scheme) or location
                offset += len(chunk)
                self.bytes_sent += len(chunk)
                progress(len(chunk))
            self.request("PUT", _with_digest(location, digest), ok=(201,),
                         headers={"Content-Length": "0"})
        return True

    def _start_upload(self) -> str:
        response = self.request("POST", f"{self.base}/blobs/uploads/", ok=(202,),
                                headers={"Content-Length": "0"})
        location = _location(response, self.reference, self.scheme)
        if not location:
            raise ModpackOSError(f"registry {self.reference.host} started an upload without "
                                 "saying where to send it (no Location header)")
        return location

    def _resume_upload(self, location: str) -> tuple[str, int]:
        """Where an interrupted chunked upload stands: (its location, bytes the registry
        holds), from ``GET`` of the session (its Range header); a new session at 0 when the
        registry lost this one."""
        try:
            response = self.request("GET", location, ok=(204, 404, 400, 416))
        except (ModpackOSError, NotFoundError):
            return self._start_upload(), 0
        if response.status_code != 204:
            return self._start_upload(), 0
        received = str(response.headers.get("Range", ""))
        end = received.rpartition("-")[2]
        offset = int(end) + 1 if end.isdigit() else 0
        return _location(response, self.reference, self.scheme) or location, offset

    # ---- manifests --------------------------------------------------------------------------

    def put_manifest(self, reference: str, body: bytes, media_type: str) -> Any:
        """PUT a manifest or index under a tag or its digest; returns the response (its
        ``OCI-Subject`` header says whether the registry indexes referrers itself)."""
        return self.request("PUT", f"{self.base}/manifests/{reference}", data=body, ok=(201,),
                            headers={"Content-Type": media_type})

    def get_manifest(self, reference: str) -> tuple[bytes, str, str]:
        """(body, media type, digest) of the manifest or index at a tag or digest; a body
        whose digest is not the one asked for is refused."""
        response = self.request("GET", f"{self.base}/manifests/{reference}",
                                headers={"Accept": ", ".join(media.MANIFEST_TYPES)})
        body = response.content
        if len(body) > _MANIFEST_LIMIT:
            raise FormatError(f"{self.reference.name}: the manifest at {reference} is "
                              f"{len(body)} bytes, more than a manifest is ({_MANIFEST_LIMIT})")
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        if reference.startswith("sha256:") and digest != reference:
            raise FormatError(f"{self.reference.name}: the registry answered {reference} with a "
                              f"manifest whose digest is {digest}: refused (damaged in transit "
                              "or a registry that rewrites manifests)")
        media_type = str(response.headers.get("Content-Type", "")).split(";")[0].strip()
        return body, media_type, digest

    def get_json(self, digest: str, limit: int = _MANIFEST_LIMIT) -> Any:
        """A small JSON blob (a config), checked against its digest."""
        response = self.request("GET", f"{self.base}/blobs/{digest}")
        body = response.content
        if len(body) > limit or "sha256:" + hashlib.sha256(body).hexdigest() != digest:
            raise FormatError(f"{self.reference.name}: blob {digest} as served does not match "
                              "its digest: refused")
        return json.loads(body)

    # ---- referrers --------------------------------------------------------------------------

    def referrers(self, digest: str, artifact_type: str) -> list[dict[str, Any]]:
        """The descriptors of manifests whose subject is |digest| and whose artifactType is
        |artifact_type|: from the referrers API, else from the OCI 1.1 fallback tag
        ``sha256-<hex>`` (an index the pusher keeps)."""
        response = self.request("GET", f"{self.base}/referrers/{digest}", ok=(200, 404),
                                headers={"Accept": media.IMAGE_INDEX})
        index: Any = None
        if response.status_code == 200:
            index = response.json()
        else:
            try:
                body, _, _ = self.get_manifest(_fallback_tag(digest))
                index = json.loads(body)
            except NotFoundError:
                return []
        manifests = index.get("manifests", []) if isinstance(index, dict) else []
        return [m for m in manifests
                if isinstance(m, dict) and m.get("artifactType") == artifact_type]

    def add_referrer(self, subject: str, descriptor: dict[str, Any],
                     indexed_by_registry: bool) -> None:
        """Record |descriptor| as a referrer of |subject| in the fallback tag's index, unless
        the registry indexes referrers itself (it answered the manifest's PUT with an
        ``OCI-Subject`` header)."""
        if indexed_by_registry:
            return
        tag = _fallback_tag(subject)
        try:
            body, _, _ = self.get_manifest(tag)
            index = json.loads(body)
        except NotFoundError:
            index = {"schemaVersion": 2, "mediaType": media.IMAGE_INDEX, "manifests": []}
        kept = [m for m in index.get("manifests", []) if m.get("digest") != descriptor["digest"]]
        index["manifests"] = [*kept, descriptor]
        self.put_manifest(tag, _canonical(index), media.IMAGE_INDEX)


def _session(requests: Any, timeout: float, old: Any) -> Any:
    """A requests session like oras's (cookies ignored) whose requests time out."""

    class _Session(requests.Session):  # type: ignore[misc]
        def request(self, *args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("timeout", timeout)
            return super().request(*args, **kwargs)

    session = _Session()
    session.cookies.set_policy(old.cookies.get_policy())
    return session


def _registry_message(response: Any) -> str:
    try:
        errors = response.json().get("errors", [])
        text = "; ".join(str(e.get("message", e.get("code", ""))) for e in errors
                         if isinstance(e, dict))
        return f": {text}" if text else ""
    except (ValueError, AttributeError):
        return ""


def _location(response: Any, reference: Reference, scheme: str) -> str:
    location = str(response.headers.get("Location", ""))
    if location and not location.startswith(("http://", "https://")):
        location = f"{scheme}://{reference.host}{location}"
    return location


def _with_digest(location: str, digest: str) -> str:
    return location + ("&" if "?" in location else "?") + f"digest={digest}"


def _fallback_tag(digest: str) -> str:
    return digest.replace(":", "-")


def _canonical(document: Any) -> bytes:
    """JSON as modpack writes it into a registry: sorted keys, no spaces (so the same
    document is the same bytes, and the same digest, every time)."""
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def iter_chunks(response: Any, size: int = 1 << 20) -> Iterator[bytes]:
    """A streaming response's body in chunks of up to |size| bytes."""
    yield from response.iter_content(chunk_size=size)
