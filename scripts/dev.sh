#!/usr/bin/env bash
# One entry point for a fresh machine: installs everything the project needs, then runs
# the demo (`scripts/dev.sh demo`), the whole test suite (`scripts/dev.sh test`), builds the
# binary wheels for deployment hosts into wheelhouse/ (`scripts/dev.sh wheels`: every CPython
# 3.9-3.13 that pyenv has, scripts/build_wheels.py), or the API reference into build/api/
# (`scripts/dev.sh docs`: Sphinx over the docstrings, a warning fails it).
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian packages: the C toolchain, CMake, and lld and mold (exports are tested with every
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

setup() {
  local missing=()
  for pkg in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo=sudo
    echo "installing Debian packages: ${missing[*]}"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
  [ -x .venv/bin/python ] || python3 -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
  # build: the authoring side (a plain `pip install modpack` only loads); test: the suite's
  # tools, zig's compiler and auditwheel for the wheels and mypy among them; docs: Sphinx.
  .venv/bin/python -m pip install -q -e ".[test,docs,cuda,triton,build]"
  # DLPack interop in the suite (tests/test_dlpack.py, which skips each without them): PyTorch's
  # CPU build and JAX's CPU wheels, pinned to the releases this project's machines hold on
  # local disk (about 40 s to install there; elsewhere torch 2.13.0 may be the large CUDA build).
  .venv/bin/python -m pip install -q "torch==2.13.0" "jax[cpu]==0.10.2"
}

case "${1:-}" in
  demo)
    setup
    .venv/bin/python examples/quickstart/demo.py
    ;;
  test)
    setup
    .venv/bin/ruff check .
    .venv/bin/python -m pytest -q "${@:2}"
    ;;
  wheels)
    setup
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
