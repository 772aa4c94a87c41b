"""Reproducible exports: the same tree exported twice, in two processes with different temp
folders, working folders and times, gives byte-identical libraries, archives and system
libraries (metadata and self-tests included), which content-addressed caches and signatures
over the whole file rely on."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time

import pytest

EXPORT = r"""
import sys
import numpy as np
import modpack

host = modpack.csource_module(r'''
#include "modpack/backend.h"
static double first(void) {
  const DLTensor* w;
  if (mp_backend_get_array("weights", &w) != MP_OK) return -1;
  return ((const float*)w->data)[0];
}
MP_EXPORT_FUNC0(first, double)
''')
ir = "define i64 @__mp_func_zero(i8* %s, i8* %a, i32 %n, i8* %r) {\n  ret i64 0\n}\n"
host.import_module(modpack.llvm_module(ir))
consts = modpack.const_module({"weights": np.linspace(0, 1, 4096, dtype=np.float32),
                               "bias": np.arange(7, dtype=np.int64)})
kernels = modpack.opencl_module("__kernel void k(__global float* x) { x[0] = 1.0f; }",
                                build_options="-DWG=64")
host.import_module(consts)
host.import_module(kernels)
kernels.import_module(consts)  # shared: a DAG
out = sys.argv[1]
host.export_library(out + "/deploy.so")
host.export_library(out + "/deploy.tar")
host.export_library(out + "/model.o", system_lib="model")
host.export_library(out + "/meta.so", metadata={"revision": "4f2a9c1", "batch": [1, 8]},
                    selftests=[modpack.SelfTest("first", returns=0.0),
                               modpack.SelfTest("k", [np.ones(4, np.float32)], device="opencl",
                                                expected={0: np.ones(4, np.float32)})])
"""

NAMES = ("deploy.so", "deploy.tar", "model.o", "meta.so")


def export_in_a_fresh_process(folder, tmpdir) -> dict[str, str]:
    folder.mkdir(parents=True)
    tmpdir.mkdir(parents=True)
    env = {**os.environ, "TMPDIR": str(tmpdir)}
    proc = subprocess.run([sys.executable, "-c", EXPORT, str(folder)], capture_output=True,
                          text=True, env=env, cwd=tmpdir)
    assert proc.returncode == 0, proc.stderr
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest() for name in NAMES}


def test_two_exports_in_two_processes_are_byte_identical(tmp_path):
    first = export_in_a_fresh_process(tmp_path / "a", tmp_path / "tmp-one")
    time.sleep(1.1)  # a different second for anything that would record the time
    second = export_in_a_fresh_process(tmp_path / "b" / "deeper", tmp_path / "t2")
    assert first == second


@pytest.mark.parametrize("name", NAMES)
def test_the_inspect_digest_identifies_the_artifact(tmp_path, name):
    from modpack.tools.inspection import inspect_library
    digests = export_in_a_fresh_process(tmp_path / "a", tmp_path / "tmp")
    report = inspect_library(tmp_path / "a" / name)
    assert report["content_digest"] == f"sha256:{digests[name]}"


def test_the_tar_writer_writes_what_tarfile_writes(tmp_path):
    """modpack writes .tar exports itself (so the blob object is written once, in its place in
    the archive): the archive is byte for byte the one tarfile writes for the same members, a
    member written in place included; two members of one name are refused."""
    import io
    import tarfile

    import modpack
    from modpack.files.tar_writer import TarWriter

    members = {"a.o": b"x" * 1000, "empty.o": b"", "block.o": bytes(range(256)) * 2,
               "b.o": os.urandom(70_000)}
    for name, data in members.items():
        (tmp_path / name).write_bytes(data)
    expected = tmp_path / "tarfile.tar"
    with tarfile.open(expected, "w", format=tarfile.USTAR_FORMAT) as tar:
        for name in members:
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(members[name]), 0o644
            with open(tmp_path / name, "rb") as f:
                tar.addfile(info, f)

    def in_place(f, offset: int) -> int:  # as a packer writes: the end first, then the start
        data = members["b.o"]
        f.seek(offset + 10)
        f.write(data[10:])
        f.seek(offset)
        f.write(data[:10])
        return len(data)

    written = tmp_path / "written.tar"
    with open(written, "w+b") as f:
        tar = TarWriter(f)
        for name in ("a.o", "empty.o", "block.o"):
            tar.add_file(name, tmp_path / name)
        tar.add_written("b.o", in_place)
        with pytest.raises(modpack.ArgumentError, match=r"two members named 'a\.o'"):
            tar.add_file("a.o", tmp_path / "a.o")
        with pytest.raises(modpack.FormatError, match="its source ended 6 bytes before"):
            tar.add_stream("short.o", io.BytesIO(b"four"), 10)
        tar.close()
    assert written.read_bytes() == expected.read_bytes()


def test_a_kernel_copy_from_a_file_cut_short_is_a_format_error(tmp_path):
    """copy_range (slim's payloads, a .tar's blob at load) names a source that ended early."""
    import modpack
    from modpack.files.kernel_copy import copy_range

    (tmp_path / "src").write_bytes(b"x" * 100)
    with open(tmp_path / "src", "rb") as src, open(tmp_path / "dst", "wb") as dst:
        copy_range(src.fileno(), dst.fileno(), 0, 0, 100)
        with pytest.raises(modpack.FormatError, match="ended 50 bytes before"):
            copy_range(src.fileno(), dst.fileno(), 50, 0, 100)
    assert (tmp_path / "dst").read_bytes()[:50] == b"x" * 50
