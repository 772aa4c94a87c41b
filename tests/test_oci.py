"""Shipping libraries through a real OCI registry: the CNCF distribution registry (Debian's
docker-registry) started on 127.0.0.1 by the tests (tests/registry.py), plain, with basic auth
and with TLS. Push, pull and load_module("oci://...") from Python and the command line; weight
layers stored once; the store's stamps; faults (the registry killed mid-push and mid-pull, a
corrupted blob served, a full disk under the store) that lose nothing and publish nothing
half-made; OpenSSF model signing checked by the model_signing tool itself; skopeo copying an
artifact to a second registry, from which it loads."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
import registry as registry_helper
from json_docs import check_keys
from registry import Registry

import modpack
from modpack.errors import (
    ArgumentError,
    FormatError,
    IncompatibleError,
    ModpackOSError,
    NotFoundError,
    SignatureError,
)

pytest.importorskip("oras")
pytestmark = pytest.mark.skipif(not registry_helper.available(),
                                reason="docker-registry is not installed (scripts/dev.sh "
                                       "installs it)")

HOST_CODE = r"""
#include "modpack/backend.h"
static double pick(int64_t i) {
  const DLTensor* w;
  if (mp_backend_get_array("w", &w) != MP_OK) return -1;
  return ((const float*)w->data)[i] + %s;
}
MP_EXPORT_FUNC(pick, double, int64_t)
"""


def export(folder: Path, offset: int = 0, size: int = 1 << 18) -> Path:
    """deploy.so referring to model.mpw (|size| float32s), host code adding |offset|."""
    folder.mkdir(parents=True, exist_ok=True)
    weights = folder / "model.mpw"
    if not weights.exists():
        modpack.save_weights({"w": np.arange(size, dtype=np.float32)}, weights)
    host = modpack.csource_module(HOST_CODE % offset)
    host.import_module(modpack.weights_module(str(weights)))
    return Path(host.export_library(folder / "deploy.so"))


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A store of the test's own, plain HTTP to loopback, quick retries."""
    monkeypatch.setenv("MODPACK_CACHE", str(tmp_path / "store"))
    monkeypatch.setenv("MODPACK_OCI_PLAIN_HTTP", "1")
    monkeypatch.setenv("MODPACK_OCI_RETRIES", "3")
    monkeypatch.setenv("DOCKER_CONFIG", str(tmp_path / "docker"))
    return tmp_path


@pytest.fixture
def registry(env):
    with Registry(env / "registry") as r:
        yield r


def cli(*args: str, env_extra: dict[str, str] | None = None, ok: bool = True
        ) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "modpack", *args], capture_output=True,
                          text=True, env={**os.environ, **(env_extra or {})}, timeout=300)
    if ok:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_push_pull_load_round_trip(registry, env, monkeypatch):
    """A pushed library and its weight file come back byte for byte into a folder and the
    store; load_module("oci://...") runs it from the store; a second load downloads nothing
    and hashes nothing (the stamps hold)."""
    lib = export(env / "src")
    result = modpack.push(lib, f"{registry.url}/team/model:v1")
    assert result.uploaded_bytes > (1 << 20) and result.skipped_layers == 0
    pulled = modpack.pull(f"{registry.url}/team/model:v1", output=env / "out")
    assert (env / "out" / "deploy.so").read_bytes() == lib.read_bytes()
    assert (env / "out" / "model.mpw").read_bytes() == (env / "src" / "model.mpw").read_bytes()
    assert pulled.downloaded == lib.stat().st_size + (env / "src" / "model.mpw").stat().st_size
    loaded = modpack.load_module(f"{registry.url}/team/model:v1")
    assert loaded["pick"](7) == 7.0
    hashed = []
    import modpack.oci.store as store

    real = store.file_digest
    monkeypatch.setattr(store, "file_digest", lambda p: hashed.append(p) or real(p))
    again = modpack.pull(f"{registry.url}/team/model:v1")
    assert again.downloaded == 0 and hashed == []
    assert modpack.load_module(f"{registry.url}/team/model:v1@{again.manifest}")["pick"](3) == 3


def test_a_weight_layer_is_stored_and_sent_once(registry, env):
    """A second tag whose library changed only in host code uploads and downloads only the new
    library (and its config): the weight layer keeps its digest (bytes counted at the
    registry)."""
    (env / "a").mkdir()
    lib1 = export(env / "a", offset=0)
    shutil.copy(env / "a" / "model.mpw", env / "b.mpw")
    (env / "b").mkdir()
    shutil.copy(env / "b.mpw", env / "b" / "model.mpw")
    lib2 = export(env / "b", offset=100)
    modpack.push(lib1, f"{registry.url}/m:v1")
    second = modpack.push(lib2, f"{registry.url}/m:v2")
    assert second.skipped_layers == 1
    assert second.uploaded_bytes < lib2.stat().st_size + 4096
    modpack.pull(f"{registry.url}/m:v1")
    before = registry.blob_bytes_sent()
    pulled = modpack.pull(f"{registry.url}/m:v2")
    sent = registry.blob_bytes_sent() - before
    assert pulled.downloaded == lib2.stat().st_size
    assert lib2.stat().st_size <= sent < lib2.stat().st_size + 4096, sent
    assert modpack.load_module(f"{registry.url}/m:v2")["pick"](1) == 101.0


def test_command_line_push_pull_and_cache(registry, env):
    """modpack push / pull -o / cache list / cache prune from the command line, with INFO
    lines (not bars) when stderr is no terminal."""
    lib = export(env / "src")
    pushed = cli("push", str(lib), f"{registry.url}/cli/model:v1")
    assert "pushed oci://" in pushed.stdout and "push model.mpw" in pushed.stderr
    pulled = cli("pull", f"{registry.url}/cli/model:v1", "-o", str(env / "out"), "--json")
    answer = json.loads(pulled.stdout)
    check_keys(answer, "`modpack pull --json`")
    assert Path(answer["library"]) == env / "out" / "deploy.so"
    assert (env / "out" / "deploy.so").read_bytes() == lib.read_bytes()
    listing = json.loads(cli("cache", "list", "--json").stdout)
    check_keys(listing, "`modpack cache list --json`")
    (entry,) = [e for e in listing["layers"]["entries"] if e["kind"] == "reference"]
    assert entry["reference"] == f"{registry.url}/cli/model:v1"
    assert sorted(entry["files"]) == ["deploy.so", "model.mpw"]
    pruned = cli("cache", "prune", f"{registry.url}/cli/model:v1")
    assert "removed 1 references" in pruned.stdout
    assert not list((env / "store" / "blobs" / "sha256").iterdir())
    assert (env / "out" / "deploy.so").read_bytes() == lib.read_bytes()  # its own link
    missing = cli("pull", f"{registry.url}/cli/nothing:v1", ok=False)
    assert missing.returncode == 1 and "has no" in missing.stderr and "Traceback" not in \
        missing.stderr


def test_basic_auth_from_docker_config(env):
    """A registry with basic auth: refused without credentials (saying how to log in), and
    served with the credentials Docker's config.json holds for it."""
    with Registry(env / "auth", auth=("alice", "s3cret")) as registry:
        lib = export(env / "src")
        with pytest.raises(SignatureError, match="docker login"):
            modpack.push(lib, f"{registry.url}/private/m:v1")
        config = env / "docker" / "config.json"
        config.parent.mkdir(exist_ok=True)
        token = base64.b64encode(b"alice:wrong").decode()
        config.write_text(json.dumps({"auths": {registry.host: {"auth": token}}}))
        with pytest.raises(SignatureError, match="refused access"):
            modpack.push(lib, f"{registry.url}/private/m:v1")
        token = base64.b64encode(b"alice:s3cret").decode()
        config.write_text(json.dumps({"auths": {registry.host: {"auth": token}}}))
        modpack.push(lib, f"{registry.url}/private/m:v1")
        assert modpack.load_module(f"{registry.url}/private/m:v1")["pick"](2) == 2.0


def test_tls_with_a_custom_ca(env, monkeypatch):
    """A registry over TLS with its own CA: refused until the CA is trusted (the message says
    how), then pushed and pulled over HTTPS."""
    monkeypatch.delenv("MODPACK_OCI_PLAIN_HTTP")
    with Registry(env / "tls", tls=True) as registry:
        lib = export(env / "src")
        with pytest.raises(ModpackOSError, match="MODPACK_OCI_CA"):
            modpack.push(lib, f"{registry.url}/secure/m:v1")
        monkeypatch.setenv("MODPACK_OCI_CA", str(registry.ca_file))
        modpack.push(lib, f"{registry.url}/secure/m:v1")
        pulled = cli("pull", f"{registry.url}/secure/m:v1", "--ca", str(registry.ca_file),
                     "-o", str(env / "out"), env_extra={"MODPACK_OCI_CA": ""})
        assert "pulled oci://" in pulled.stdout
        assert (env / "out" / "deploy.so").read_bytes() == lib.read_bytes()


def test_a_corrupted_blob_is_refused(registry, env):
    """A blob the registry serves with other bytes than its digest says is refused while it
    streams in: FormatError, nothing published in the store, no partial file kept."""
    lib = export(env / "src")
    result = modpack.push(lib, f"{registry.url}/bad/m:v1")
    manifest = json.loads(registry.blob_path(result.digest).read_bytes())
    weights = next(layer for layer in manifest["layers"]
                   if layer["annotations"]["org.opencontainers.image.title"] == "model.mpw")
    data = registry.blob_path(weights["digest"])
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    data.write_bytes(bytes(raw))
    with pytest.raises(FormatError, match="refused, nothing was published"):
        modpack.pull(f"{registry.url}/bad/m:v1", output=env / "out")
    store = env / "store"
    assert not (store / "blobs" / "sha256" / weights["digest"][7:]).exists()
    assert list((store / "partial").iterdir()) == []
    assert not (env / "out" / "deploy.so").exists()
    with pytest.raises(FormatError):
        modpack.load_module(f"{registry.url}/bad/m:v1")


def test_killed_mid_pull_resumes(registry, env, monkeypatch):
    """The registry killed in the middle of a layer's download: with it back, the pull
    resumes at the byte it reached (a ranged GET answered 206); with it gone for good, the
    pull fails, nothing is published, and the next pull resumes from the partial file."""
    # 64 MiB of weights: more than loopback's socket buffers hold, so that the bytes after the
    # kill are not already on their way (with 8 MiB, a busy machine could receive them all).
    lib = export(env / "src", size=1 << 24)
    modpack.push(lib, f"{registry.url}/kill/m:v1")
    import modpack.oci.progress as progress

    real_call = progress.LayerProgress.__call__
    state = {"killed": False, "restart": True}

    def call(self, n):
        real_call(self, n)
        if self.name == "model.mpw" and self.done > (3 << 20) and not state["killed"]:
            state["killed"] = True
            registry.kill()
            if state["restart"]:
                threading.Timer(0.3, registry.start).start()

    monkeypatch.setattr(progress.LayerProgress, "__call__", call)
    monkeypatch.setattr(sys.modules["modpack.oci.pull"], "_CHUNK", 1 << 18)
    pulled = modpack.pull(f"{registry.url}/kill/m:v1", output=env / "out")
    assert state["killed"]
    assert (env / "out" / "model.mpw").read_bytes() == (env / "src" / "model.mpw").read_bytes()
    assert registry.logged(lambda _, path, status, __: status == 206 and "/blobs/" in path)
    assert pulled.downloaded == lib.stat().st_size + (env / "src" / "model.mpw").stat().st_size

    modpack.push(export(env / "src2", size=1 << 24, offset=5), f"{registry.url}/kill/m:v2")
    shutil.rmtree(env / "store")
    state.update(killed=False, restart=False)
    monkeypatch.setenv("MODPACK_OCI_RETRIES", "1")
    with pytest.raises(ModpackOSError, match="kept to resume"):
        modpack.pull(f"{registry.url}/kill/m:v2")
    (partial,) = (env / "store" / "partial").iterdir()
    kept = partial.stat().st_size
    assert kept > (3 << 20)
    assert not any(p.stat().st_size > (1 << 20) for p in (env / "store" / "blobs" /
                                                          "sha256").iterdir())
    registry.start()
    before = registry.blob_bytes_sent()
    again = modpack.pull(f"{registry.url}/kill/m:v2")
    weights = (env / "src2" / "model.mpw").stat().st_size
    assert registry.blob_bytes_sent() - before == weights - kept
    assert again.weights["model.mpw"].read_bytes() == (env / "src2" / "model.mpw").read_bytes()


def test_killed_mid_push_resumes(registry, env, monkeypatch):
    """The registry killed in the middle of a chunked upload: back again, the push continues
    where the registry's upload session stands; gone for good, the push fails and publishes no
    tag, and pushing again completes it."""
    lib = export(env / "src", size=1 << 21)
    import modpack.oci.progress as progress
    from modpack.oci import RegistrySettings

    real_call = progress.LayerProgress.__call__
    state = {"killed": False, "restart": True}

    def call(self, n):
        real_call(self, n)
        if self.name == "model.mpw" and self.done >= (3 << 20) and not state["killed"]:
            state["killed"] = True
            registry.kill()
            if state["restart"]:
                threading.Timer(0.3, registry.start).start()

    monkeypatch.setattr(progress.LayerProgress, "__call__", call)
    settings = RegistrySettings(chunk_size=1 << 20)
    modpack.push(lib, f"{registry.url}/push/m:v1", settings=settings)
    assert state["killed"]
    pulled = modpack.pull(f"{registry.url}/push/m:v1", output=env / "out")
    assert pulled.weights["model.mpw"].read_bytes() == (env / "src" / "model.mpw").read_bytes()

    lib2 = export(env / "src2", size=(1 << 21) + 1024, offset=1)  # new weights
    state.update(killed=False, restart=False)
    with pytest.raises(ModpackOSError, match=r"nothing was published|did not answer"):
        modpack.push(lib2, f"{registry.url}/push/m:v2", settings=RegistrySettings(
            chunk_size=1 << 20, retries=1))
    registry.start()
    with pytest.raises(NotFoundError):
        modpack.pull(f"{registry.url}/push/m:v2")
    state["killed"] = True  # no more kills
    modpack.push(lib2, f"{registry.url}/push/m:v2", settings=settings)
    assert modpack.load_module(f"{registry.url}/push/m:v2")["pick"](4) == 5.0


def test_a_changed_store_file_is_hashed_again(registry, env):
    """A blob changed in the store after it was stamped is hashed again, found wrong,
    removed, and fetched anew; the load gets the right bytes."""
    lib = export(env / "src")
    modpack.push(lib, f"{registry.url}/stamp/m:v1")
    pulled = modpack.pull(f"{registry.url}/stamp/m:v1")
    blob = pulled.weights["model.mpw"]
    os.chmod(blob, 0o644)
    with open(blob, "r+b") as f:
        f.seek(100)
        f.write(b"\xff\xff\xff\xff")
    again = modpack.pull(f"{registry.url}/stamp/m:v1")
    assert again.downloaded == (env / "src" / "model.mpw").stat().st_size
    assert again.weights["model.mpw"].read_bytes() == (env / "src" / "model.mpw").read_bytes()


DISK_FULL = r"""
import os, sys, json
import modpack
try:
    modpack.pull(sys.argv[1])
    print(json.dumps({"error": None}))
except modpack.ModpackError as exc:
    store = os.environ["MODPACK_CACHE"]
    print(json.dumps({"error": str(exc), "kind": type(exc).__name__,
                      "blobs": sorted(os.listdir(os.path.join(store, "blobs", "sha256")))}))
"""


def test_a_full_disk_under_the_store(registry, env):
    """Pulling into a store on a full file system (a 2 MiB tmpfs, 4 MiB of weights): the
    error names the store and how to make room; no blob is published half-written."""
    lib = export(env / "src", size=1 << 20)
    modpack.push(lib, f"{registry.url}/full/m:v1")
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "true"],
                           capture_output=True, text=True) if shutil.which("unshare") else None
    if probe is None or probe.returncode != 0:
        pytest.skip("cannot mount a small file system here (unshare --user --mount)")
    disk = env / "disk"
    disk.mkdir()
    script = env / "full.py"
    script.write_text(DISK_FULL)
    command = (f"mount -t tmpfs -o size=2m modpack-full {disk} && MODPACK_CACHE={disk}/store "
               f"exec {sys.executable} {script} {registry.url}/full/m:v1")
    proc = subprocess.run(["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                           command], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "no space left on device" in result["error"], result
    assert f"{disk}/store" in result["error"] and "modpack cache prune" in result["error"]
    weights_digest = json.loads(registry.blob_path(modpack.push(
        lib, f"{registry.url}/full/m:v1").digest).read_bytes())["layers"][1]["digest"]
    assert weights_digest[7:] not in result["blobs"]


@pytest.fixture
def ec_keys(env):
    key, public = env / "oms.pem", env / "oms.pub.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                    str(key)], check=True)
    subprocess.run(["openssl", "ec", "-in", str(key), "-pubout", "-out", str(public)],
                   check=True, capture_output=True)
    other = env / "other.pem"
    subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out",
                    str(other)], check=True)
    other_public = env / "other.pub.pem"
    subprocess.run(["openssl", "ec", "-in", str(other), "-pubout", "-out", str(other_public)],
                   check=True, capture_output=True)
    return key, public, other_public


def model_signing_verify(folder: Path, bundle: Path, public: Path
                         ) -> subprocess.CompletedProcess[str]:
    tool = Path(sys.executable).parent / "model_signing"
    return subprocess.run([str(tool), "verify", "key", str(folder), "--signature", str(bundle),
                           "--public_key", str(public)], capture_output=True, text=True,
                          timeout=120)


def test_oms_sign_verify_locally(env, ec_keys):
    """`modpack sign --oms` writes a bundle over the library and its weight file that the
    model_signing tool verifies unchanged; load_module(trusted_oms=) checks it before loading
    and refuses a changed weight file, another key, or a missing bundle; in-file Ed25519
    signatures keep working beside it."""
    key, public, other = ec_keys
    lib = export(env / "src")
    (env / "src" / "notes.txt").write_text("not part of the model")
    ed, ed_pub = env / "ed.pem", env / "ed.pub.pem"
    subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", str(ed)], check=True)
    subprocess.run(["openssl", "pkey", "-in", str(ed), "-pubout", "-out", str(ed_pub)],
                   check=True)
    signed = cli("sign", str(lib), "--key", str(ed), "--oms", str(key))
    assert "OMS bundle" in signed.stdout
    bundle = env / "src" / "deploy.so.sig"
    tool = model_signing_verify(env / "src", bundle, public)
    assert tool.returncode == 0, tool.stdout + tool.stderr
    loaded = modpack.load_module(lib, trusted_oms=public, trusted_keys=[ed_pub])
    assert loaded["pick"](9) == 9.0
    with pytest.raises(SignatureError, match="does not hold for any trusted key"):
        modpack.load_module(lib, trusted_oms=other)
    refused = cli("sign", str(lib), "--oms", str(ed), ok=False)
    assert refused.returncode == 1 and "elliptic-curve key" in refused.stderr
    weights = env / "src" / "model.mpw"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 1
    weights.write_bytes(bytes(raw))
    assert model_signing_verify(env / "src", bundle, public).returncode != 0
    with pytest.raises(SignatureError):
        modpack.load_module(lib, trusted_oms=public, verify_checksums=False)
    bundle.unlink()
    with pytest.raises(SignatureError, match="has no OMS signature"):
        modpack.load_module(lib, trusted_oms=public)


def test_oms_bundle_travels_as_a_referrer(registry, env, ec_keys):
    """`modpack push --oms KEY` pushes the bundle as a referrer of the manifest; a pull with
    the public key verifies it (from the store's digests) before anything loads, the pulled
    folder verifies with the model_signing tool, and another key is refused."""
    key, public, other = ec_keys
    lib = export(env / "src")
    cli("push", str(lib), f"{registry.url}/signed/m:v1", "--oms", str(key))
    loaded = modpack.load_module(f"{registry.url}/signed/m:v1", trusted_oms=[public])
    assert loaded["pick"](1) == 1.0
    pulled = cli("pull", f"{registry.url}/signed/m:v1", "-o", str(env / "out"), "--oms-key",
                 str(public))
    assert "OMS signature verified" in pulled.stdout
    tool = model_signing_verify(env / "out", env / "out" / "deploy.so.sig", public)
    assert tool.returncode == 0, tool.stdout + tool.stderr
    with pytest.raises(SignatureError):
        modpack.load_module(f"{registry.url}/signed/m:v1", trusted_oms=[other])
    modpack.push(lib, f"{registry.url}/signed/unsigned:v1")
    (env / "src" / "deploy.so.sig").unlink(missing_ok=True)
    with pytest.raises(SignatureError, match="no OMS signature"):
        modpack.load_module(f"{registry.url}/signed/unsigned:v1", trusted_oms=public)


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


@needs_nvcc
def test_device_variants(registry, env):
    """--variants pushes an image index of slimmed libraries sharing one weight layer; a pull
    for a device takes the variant its loader would choose (sm_86 gets sm_80's cubin) and
    transfers only that variant's library and the weights; a device no variant serves is
    refused naming the variants; the host without a GPU takes the first."""
    kernel = env / "k.cu"
    kernel.write_text('extern "C" __global__ void scale(float* x, int n) { x[0] *= n; }\n')
    bins = {}
    for arch in ("sm_80", "sm_90"):
        subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-o", str(env / arch), str(kernel)],
                       check=True, capture_output=True)
        bins[arch] = (env / arch).read_bytes()
    (env / "src").mkdir()
    weights = env / "src" / "model.mpw"
    modpack.save_weights({"w": np.arange(1 << 18, dtype=np.float32)}, weights)
    host = modpack.csource_module(HOST_CODE % 0)
    host.import_module(modpack.cuda_module(binaries=bins,
                                           functions={"scale": ["float32*", "int32"]}))
    host.import_module(modpack.weights_module(str(weights)))
    lib = Path(host.export_library(env / "src" / "deploy.so"))
    cli("push", str(lib), f"{registry.url}/gpu/m:v1", "--variants", "sm_80,sm_90")
    before = registry.blob_bytes_sent()
    pulled = modpack.pull(f"{registry.url}/gpu/m:v1", device="cuda:sm_90", output=env / "o90")
    sent = registry.blob_bytes_sent() - before
    assert pulled.device == "cuda:sm_90"
    size = pulled.library.stat().st_size
    assert size < lib.stat().st_size
    assert size + weights.stat().st_size <= sent < size + weights.stat().st_size + 8192
    report = modpack.preflight(pulled.library, "cuda:sm_90")
    assert report["fits"]
    assert modpack.pull(f"{registry.url}/gpu/m:v1", device="sm_86").device == "cuda:sm_80"
    with pytest.raises(IncompatibleError, match="has no variant for cuda:sm_75"):
        modpack.pull(f"{registry.url}/gpu/m:v1", device="cuda:sm_75")
    assert modpack.pull(f"{registry.url}/gpu/m:v1").device == "cuda:sm_80"


@pytest.mark.skipif(shutil.which("skopeo") is None, reason="skopeo is not installed")
def test_skopeo_copies_the_artifact_to_another_registry(registry, env):
    """skopeo copy --all of a pushed artifact (its index, manifests and layers) to a second
    registry; a pull from there loads."""
    lib = export(env / "src")
    modpack.push(lib, f"{registry.url}/copy/m:v1")
    with Registry(env / "second") as second:
        subprocess.run(["skopeo", "copy", "--all", "--src-tls-verify=false",
                        "--dest-tls-verify=false", f"docker://{registry.host}/copy/m:v1",
                        f"docker://{second.host}/copy/m:v1"], check=True, capture_output=True,
                       timeout=120)
        loaded = modpack.load_module(f"{second.url}/copy/m:v1")
        assert loaded["pick"](6) == 6.0


@pytest.mark.parametrize("text, fragment", [
    ("ghcr.io/team/m:v1", "not a registry reference"),
    ("oci://ghcr.io", "no repository"),
    ("oci://ghcr.io/Team/m:v1", "not a repository name"),
    ("oci://ghcr.io/team/m:-bad", "is not a tag"),
    ("oci://ghcr.io/team/m@sha256:abc", "is not sha256:"),
    ("oci://bad host/m:v1", "not a registry host"),
])
def test_bad_references(env, text, fragment):
    """A malformed reference is an ArgumentError naming the part that is wrong."""
    with pytest.raises(ArgumentError, match=fragment):
        modpack.pull(text)


def test_unreachable_registry_is_said(env, monkeypatch):
    """No registry at the address: ModpackOSError after the retries, saying so."""
    monkeypatch.setenv("MODPACK_OCI_RETRIES", "1")
    port = registry_helper.free_port()
    with pytest.raises(ModpackOSError, match=r"did not answer .* after 2 attempts"):
        modpack.pull(f"oci://127.0.0.1:{port}/x/y:v1")
