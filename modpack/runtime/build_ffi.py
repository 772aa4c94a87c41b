"""cffi API-mode builder for ``modpack._rt``: the runtime in ``csrc/`` compiled into the package.

The declarations come from the public headers themselves (the blocks between ``MP_API_BEGIN``
and ``MP_API_END``), so the Python binding can never drift from the C API.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import cffi

ROOT = Path(__file__).resolve().parents[2]
CSRC = ROOT / "csrc"
# The core headers in dependency order, then every kind's payload header (kernel.h, shared by
# the device kinds, first): a new kind's header is read without an edit here.
_KINDS = sorted((CSRC / "include" / "modpack" / "kinds").glob("*.h"),
                key=lambda p: (p.name != "kernel.h", p.name))
_CORE = ("abi.h", "format.h", "weights.h", "system_lib.h", "modpack.h", "kind.h")
HEADERS = ["dlpack/dlpack.h"] + [f"modpack/{name}" for name in _CORE] + [
    f"modpack/kinds/{p.name}" for p in _KINDS
]
# String constants of the headers (cffi's cdef takes only integer #defines): declared here,
# their values compiled from the headers' macros, so Python reads names such as the blob
# symbol from the one place C defines them.
STRING_CONSTANTS = """
static const char *const MP_FORMAT_MAGIC;
static const char *const MP_SEAL_MAGIC;
static const char *const MP_SIGNATURE_MAGIC;
static const char *const MP_SIGNATURES_MAGIC;
static const char *const MP_SIGNATURE_CONTEXT;
static const char *const MP_SIGNATURE_CONTEXT_V2;
static const char *const MP_SEAL_NOTE_NAME;
static const char *const MP_WEIGHTS_MAGIC;
static const char *const MP_WEIGHTS_SIGNATURE_CONTEXT;
static const char *const MP_WEIGHTS_KIND;
static const char *const MP_KERNEL_CACHE_MAGIC;
static const char *const MP_KERNEL_CACHE_KEY_CONTEXT;
static const char *const MP_BLOB_SYMBOL;
static const char *const MP_LIB_TYPE_KEY;
static const char *const MP_LIBRARY_TYPE_KEY;
static const char *const MP_FUNC_SYMBOL_PREFIX;
static const char *const MP_SIGNATURE_SYMBOL_PREFIX;
static const char *const MP_CTX_LIBRARY_SYMBOL;
"""

# Callbacks the runtime makes into Python (loaders, module vtables and functions written in
# Python, modpack/runtime/callbacks.py; load phases for the logger, modpack/runtime/load_log.py),
# the runtime's internal hook for the latter (core/trace.h), and the binding's own C
# (binding.c). Declared here only, because the binding alone uses them.
PYTHON_CALLBACKS = """
extern "Python" mp_status_t _mp_py_loader(void*, const mp_loader_args_t*, mp_module_t**);
extern "Python" mp_status_t _mp_py_get_function(mp_module_t*, const char*, mp_function_t**);
extern "Python" void _mp_py_release(void*);
extern "Python" mp_status_t _mp_py_call(void*, const mp_value_t*, int32_t, mp_value_t*);
typedef void (*mp_trace_callback_t)(const char*, const char*, double, const char*);
void mp_trace_set_callback(mp_trace_callback_t);
extern "Python" void _mp_py_load_phase(const char*, const char*, double, const char*);
uintptr_t modpack_calls_api(void);
mp_status_t modpack_count_args(void*, const mp_value_t*, int32_t, mp_value_t*);
mp_status_t modpack_probe_module(mp_module_t**);
"""

# The binding's C: every header the declarations come from, then the binding's own C (which may
# use Python's C API, unlike csrc/): see binding.c.
BINDING_SOURCE = "".join(f'#include "{name}"\n' for name in [*HEADERS, "core/trace.h"]) + (
    Path(__file__).parent / "binding.c"
).read_text()


def api_declarations() -> str:
    """Concatenate the cffi-parsable API blocks of the public headers."""
    parts = []
    for name in HEADERS:
        text = (CSRC / "include" / name).read_text()
        for block in re.findall(r"/\* MP_API_BEGIN \*/(.*?)/\* MP_API_END \*/", text, re.S):
            block = re.sub(r"/\*.*?\*/", "", block, flags=re.S)
            parts.append(block.replace("MP_API ", ""))
    return "\n".join(parts)


def _check_xxhash() -> None:
    candidates = [Path(p) / "xxhash.h" for p in ("/usr/include", "/usr/local/include")]
    extra = os.environ.get("CPATH", "")
    candidates += [Path(p) / "xxhash.h" for p in extra.split(os.pathsep) if p]
    if not any(c.exists() for c in candidates):
        raise RuntimeError(
            "building modpack's runtime needs the xxHash header (xxhash.h): install it with "
            "`apt-get install libxxhash-dev` (Debian/Ubuntu) or your system's xxhash package"
        )


_check_xxhash()
ffibuilder = cffi.FFI()
ffibuilder.cdef(api_declarations() + STRING_CONSTANTS + PYTHON_CALLBACKS)
ffibuilder.set_source(
    "modpack._rt",
    BINDING_SOURCE,
    # Relative paths: setuptools builds from the project root and refuses absolute ones.
    sources=sorted(p.relative_to(ROOT).as_posix() for p in (CSRC / "src").rglob("*.c")),
    include_dirs=["csrc/include", "csrc/src", "modpack/runtime"],
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra"],
    # The runtime's calls to its own API functions bind inside the library, not through the
    # PLT, and what it imports is bound at import (-z now, with full RELRO): no lazy symbol
    # resolution inside a load or a first call, no indirect jump on every call. (-Bsymbolic
    # binds data too: nothing links against this extension, so no program has a copy of its
    # data; zig cc, which builds the wheels, has no -Bsymbolic-functions.)
    extra_link_args=["-Wl,-Bsymbolic", "-Wl,-z,now", "-Wl,-z,relro"],
    libraries=["dl", "pthread"],
    py_limited_api=False,
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=str(ROOT / "build" / "cffi"), verbose=True)
