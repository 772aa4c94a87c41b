"""The README's Python code runs: its fenced ``python`` blocks are run in order, in one
namespace, in a fresh folder, as a reader would paste them; and its fences are whole (a fence
left open turns the rest of the file into code).

A block may be marked by an HTML comment on the line before its fence (invisible on the
rendered page):

- ``<!-- readme-test: setup=NAME -->``: SETUPS[NAME] below runs first, making what the block
  takes as given (a host.c, arrays, keys) — the prose around the block says what they are;
- ``<!-- readme-test: needs=PROGRAM -->``: skipped, saying so, when PROGRAM is not on PATH;
- ``<!-- readme-test: skip=REASON -->``: never run here (a GPU, the network), with REASON;
- ``<!-- readme-test: file=NAME -->``: a whole script the prose saves as NAME and runs by
  itself: it is saved so and run as ``python NAME`` in the reader's folder, sharing nothing with
  the other blocks (tests/test_wheel.py runs the "Try it" one from an installed wheel too).
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ROOT

README = ROOT / "README.md"
_FENCE = re.compile(r"^(`{3,})(\w*)\s*$")
_MARK = re.compile(r"^<!-- readme-test: (setup|needs|skip|file)=(.+?) -->$")

HOST_C = r'''
#include "modpack/backend.h"
static void pipeline(const DLTensor* a, const DLTensor* b, DLTensor* out) {
  const float* x = a->data; const float* y = b->data; float* z = out->data;
  for (int64_t i = 0; i < a->shape[0]; ++i) z[i] = x[i] + y[i];
}
MP_EXPORT_TYPED_VOID_FUNC(pipeline, "a: float32[n] cpu, b: float32[n] cpu, out: float32[n] cpu",
                          const DLTensor*, const DLTensor*, DLTensor*)
'''

SETUPS = {
    # The opening example: host code, an OpenCL kernel, weights and three arrays.
    "intro": f"""
open("host.c", "w").write({HOST_C!r})
kernels_cl = "__kernel void scale(__global float* x, float k) {{ x[get_global_id(0)] *= k; }}"
weights = np.arange(16, dtype=np.float32)
a, b, out = np.ones(16, np.float32), np.full(16, 2, np.float32), np.empty(16, np.float32)
""",
    # After the README's `openssl genpkey ...` and `modpack sign deploy.so --key key.pem`.
    "signed": """
import subprocess
subprocess.run(["openssl", "genpkey", "-algorithm", "ed25519", "-out", "key.pem"], check=True)
subprocess.run(["openssl", "pkey", "-in", "key.pem", "-pubout", "-out", "key.pub.pem"],
               check=True)
subprocess.run([sys.executable, "-m", "modpack", "sign", "deploy.so", "--key", "key.pem"],
               check=True, capture_output=True)
""",
    # The tree exported as a .tar too, the library's bytes, and the tree's root.
    "forms": """
host.export_library("deploy.tar")
decrypted = open("deploy.so", "rb").read()
root = host
""",
    # Two arrays, new values for them, and another tree whose const arrays go to a weight
    # file at export.
    "weights": """
w1, w2 = np.arange(4096, dtype=np.float32), np.ones((64, 64), np.float16)
modpack.save_weights({"w1": w1 * 2, "w2": w2 * 3}, "finetuned.mpw")
other = modpack.csource_module(open("host.c").read())
other.import_module(modpack.const_module({"bias": np.zeros(16, np.float32)}))
""",
    # A model where its users keep it: safetensors shards with their index, one GGUF file, an
    # adapter, all written by their formats' own writers.
    "foreign": """
import json
from safetensors.numpy import save_file
import gguf
save_file({"w1": np.arange(4096, dtype=np.float32)}, "model-00001-of-00002.safetensors")
save_file({"w2": np.ones((64, 64), np.float16)}, "model-00002-of-00002.safetensors")
json.dump({"weight_map": {"w1": "model-00001-of-00002.safetensors",
                          "w2": "model-00002-of-00002.safetensors"}},
          open("model.safetensors.index.json", "w"))
save_file({"lora_a": np.zeros((8, 64), np.float16)}, "adapter.safetensors")
g = gguf.GGUFWriter("tiny.gguf", "llama")
g.add_tensor("w1", np.arange(4096, dtype=np.float32))
g.write_header_to_file(); g.write_kv_data_to_file(); g.write_tensors_to_file(); g.close()
host = modpack.csource_module(open("host.c").read())
""",
}


def _blocks() -> list[tuple[int, str, dict[str, str]]]:
    """(line, code, marks) of each python block, in order (up to a fence that never closes,
    which the test below reports)."""
    lines = README.read_text().splitlines()
    blocks: list[tuple[int, str, dict[str, str]]] = []
    fence, language, start, marks = None, "", 0, {}
    for number, line in enumerate(lines, 1):
        m = _FENCE.match(line)
        if fence is None and m:
            fence, language, start = m[1], m[2], number
            mark = _MARK.match(lines[number - 2]) if number > 1 else None
            marks = {mark[1]: mark[2]} if mark else {}
        elif fence is not None and line.strip() == fence:
            if language == "python":
                blocks.append((start, "\n".join(lines[start:number - 1]), marks))
            fence = None
    return blocks


BLOCKS = _blocks()


def test_every_fence_closes_and_no_heading_is_inside_code():
    lines = README.read_text().splitlines()
    inside = None
    for number, line in enumerate(lines, 1):
        m = _FENCE.match(line)
        if inside is None and m:
            inside = (m[1], number)
        elif inside is not None and line.strip() == inside[0]:
            inside = None
        elif inside is not None and line.startswith("## "):
            pytest.fail(f"README.md:{number}: heading {line!r} is inside the code block "
                        f"opened at line {inside[1]}")
    assert inside is None, f"README.md: the fence at line {inside[1]} never closes"


def test_the_marks_name_known_setups():
    assert len(BLOCKS) >= 5, "found too few python blocks in README.md: check the reader"
    for line, _, marks in BLOCKS:
        if "setup" in marks:
            assert marks["setup"] in SETUPS, f"README.md:{line}: no setup {marks['setup']!r}"


@pytest.fixture(scope="module")
def reader(tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[tuple[Path, dict[str, object]]]:
    """The reader's folder and namespace, shared by the blocks in order (and the root
    logger as it was, after a block that configures logging)."""
    namespace: dict[str, object] = {"__name__": "__readme__"}
    exec("import os, sys\nimport numpy as np\nimport modpack", namespace)
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield tmp_path_factory.mktemp("readme"), namespace
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.parametrize(("line", "code", "marks"), BLOCKS,
                         ids=[f"line{line}" for line, _, _ in BLOCKS])
def test_a_readme_python_block_runs(line, code, marks, reader, monkeypatch):
    folder, namespace = reader
    if "skip" in marks:
        pytest.skip(f"README.md:{line}: {marks['skip']}")
    if "needs" in marks and shutil.which(marks["needs"]) is None:
        pytest.skip(f"README.md:{line}: needs {marks['needs']}, which is not on PATH")
    monkeypatch.chdir(folder)
    if "file" in marks:
        (folder / marks["file"]).write_text(code + "\n")
        proc = subprocess.run([sys.executable, marks["file"]], cwd=folder, capture_output=True,
                              text=True, timeout=600)
        assert proc.returncode == 0, f"README.md:{line}: {proc.stdout}{proc.stderr}"
        return
    if "setup" in marks:
        exec(compile(SETUPS[marks["setup"]], f"<setup {marks['setup']}>", "exec"), namespace)
    exec(compile(code, f"README.md:{line}", "exec"), namespace)
