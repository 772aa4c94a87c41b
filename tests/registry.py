"""A real OCI registry for the tests and benchmarks: the CNCF distribution registry (Debian's
``docker-registry``, installed by scripts/dev.sh) started on 127.0.0.1 at a free port, storing
in a folder of the caller's, optionally with basic auth (an htpasswd file, bcrypt) and TLS (a
self-signed certificate made by ``openssl`` for 127.0.0.1). It can be killed (SIGKILL, as a
crash) and started again on the same port and storage, and it counts the bytes it served and
received from its access log, which is how the benchmarks measure what a pull transferred.

    with Registry(tmp_path / "reg", auth=("alice", "secret"), tls=True) as registry:
        registry.url     # "oci://127.0.0.1:PORT"
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

BINARY = shutil.which("docker-registry") or "/usr/bin/docker-registry"
# The access log's lines (Apache's combined format): the request, status and bytes sent.
_ACCESS = re.compile(r'"(?P<method>[A-Z]+) (?P<path>\S+) HTTP/[0-9.]+" (?P<status>\d{3}) '
                     r'(?P<bytes>\d+|-)')


def available() -> bool:
    """Whether the registry binary is installed (scripts/dev.sh installs it)."""
    return os.path.exists(BINARY)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Registry:
    """One registry process over one storage folder; see the module's docstring."""

    def __init__(self, folder: Path, *, auth: tuple[str, str] | None = None,
                 tls: bool = False) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.auth = auth
        self.tls = tls
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = self.folder / "registry.log"
        self.ca_file: Path | None = None
        self._write_config()

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def url(self) -> str:
        return f"oci://{self.host}"

    def _write_config(self) -> None:
        lines = ["version: 0.1", "log:", "  level: warn", "  accesslog:", "    disabled: false",
                 "storage:", "  filesystem:", f"    rootdirectory: {self.folder / 'data'}",
                 "  delete:", "    enabled: true", "http:", f"  addr: {self.host}",
                 # a fixed secret: an upload session survives a restart, so a push resumes
                 "  secret: modpack-tests-fixed-secret"]
        if self.tls:
            cert, key = self.folder / "cert.pem", self.folder / "key.pem"
            subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                            "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2",
                            "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                            "-keyout", str(key), "-out", str(cert)],
                           check=True, capture_output=True)
            self.ca_file = cert
            lines += ["  tls:", f"    certificate: {cert}", f"    key: {key}"]
        if self.auth:
            import bcrypt

            user, password = self.auth
            hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=5)).decode()
            (self.folder / "htpasswd").write_text(f"{user}:{hashed}\n")
            lines += ["auth:", "  htpasswd:", "    realm: modpack-tests",
                      f"    path: {self.folder / 'htpasswd'}"]
        (self.folder / "config.yml").write_text("\n".join(lines) + "\n")

    def start(self) -> Registry:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen([BINARY, "serve", str(self.folder / "config.yml")],
                                        stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 20
        scheme = "https" if self.tls else "http"
        context = ssl.create_default_context(cafile=str(self.ca_file)) if self.tls else None
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the registry exited: {self.log_path.read_text()[-2000:]}")
            try:
                urllib.request.urlopen(f"{scheme}://{self.host}/v2/", timeout=1, context=context)
                return self
            except urllib.error.HTTPError:  # 401: up, and asking for credentials
                return self
            except (urllib.error.URLError, OSError):
                time.sleep(0.05)
        raise RuntimeError(f"the registry did not start: {self.log_path.read_text()[-2000:]}")

    def kill(self) -> None:
        """SIGKILL, as a crash: no request it was serving is finished."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()
        self.process = None

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()
        self.process = None

    def __enter__(self) -> Registry:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def requests(self) -> list[tuple[str, str, int, int]]:
        """(method, path, status, bytes sent) of every request in the access log so far."""
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            m = _ACCESS.search(line)
            if m:
                sent = 0 if m["bytes"] == "-" else int(m["bytes"])
                out.append((m["method"], m["path"], int(m["status"]), sent))
        return out

    def logged(self, matches, timeout: float = 5.0) -> bool:
        """Whether a request |matches| (method, path, status, bytes sent) is in the access log,
        waiting up to |timeout| seconds for it: the registry writes a request's line after it
        has sent the last byte, which the client may have read a moment before."""
        deadline = time.monotonic() + timeout
        while True:
            if any(matches(*r) for r in self.requests()):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)

    def blob_bytes_sent(self) -> int:
        """Bytes of blob content the registry sent (GETs of /blobs/ answered 200 or 206)."""
        return sum(sent for method, path, status, sent in self.requests()
                   if method == "GET" and "/blobs/sha256:" in path and status in (200, 206))

    def blob_path(self, digest: str) -> Path:
        """Where the registry's filesystem driver keeps a blob's bytes."""
        hexdigest = digest.split(":", 1)[1]
        return (self.folder / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256"
                / hexdigest[:2] / hexdigest / "data")
