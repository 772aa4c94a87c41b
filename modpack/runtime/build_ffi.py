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
HEADERS = ["dltensor.h", "abi.h", "format.h", "modpack.h", "opencl.h", "cuda.h"]

# Callbacks the runtime makes into Python: loaders, module vtables and functions written in
# Python. Declared here only, because they exist only in the binding.
PYTHON_CALLBACKS = """
extern "Python" mp_status_t _mp_py_loader(void*, const mp_loader_args_t*, mp_module_t**);
extern "Python" mp_status_t _mp_py_get_function(mp_module_t*, const char*, mp_function_t**);
extern "Python" void _mp_py_release(void*);
extern "Python" mp_status_t _mp_py_call(void*, const mp_value_t*, int32_t, mp_value_t*);
void* modpack_capsule_destructor(void);
mp_status_t modpack_count_args(void*, const mp_value_t*, int32_t, mp_value_t*);
mp_status_t modpack_probe_module(mp_module_t**);
"""

# Binding-only C (compiled with Python.h, unlike csrc/): the destructor of the DLPack capsules
# modpack arrays hand out. A capsule still named "dltensor" was never consumed, so its managed
# tensor is released here; a consumer renames it "used_dltensor" and owns it instead.
BINDING_SOURCE = """
#include "modpack/modpack.h"
#include "modpack/opencl.h"

static void modpack_capsule_destructor_impl(PyObject* capsule) {
  if (PyCapsule_IsValid(capsule, "used_dltensor")) return;
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  DLManagedTensor* managed = (DLManagedTensor*)PyCapsule_GetPointer(capsule, "dltensor");
  if (managed && managed->deleter) managed->deleter(managed);
  PyErr_Clear();
  PyErr_Restore(type, value, traceback);
}

void* modpack_capsule_destructor(void) { return (void*)modpack_capsule_destructor_impl; }

/* A packed function returning its argument count: the binding calls it at import so that a
 * user's first call runs through warm code (see modpack/runtime/function.py). */
mp_status_t modpack_count_args(void* self, const mp_value_t* args, int32_t n, mp_value_t* ret) {
  (void)self;
  (void)args;
  *ret = mp_int(n);
  return MP_OK;
}

/* A module offering modpack_count_args under any name, for the same warm-up. */
static mp_status_t probe_get_function(mp_module_t* self, const char* name, mp_function_t** out) {
  (void)name;
  return mp_function_create(modpack_count_args, NULL, NULL, self, out);
}

static const mp_module_vtable_t probe_vtable = {.get_function = probe_get_function};

mp_status_t modpack_probe_module(mp_module_t** out) {
  return mp_module_create("modpack.probe", &probe_vtable, NULL, out);
}
"""


def api_declarations() -> str:
    """Concatenate the cffi-parsable API blocks of the public headers."""
    parts = []
    for name in HEADERS:
        text = (CSRC / "include" / "modpack" / name).read_text()
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
ffibuilder.cdef(api_declarations() + PYTHON_CALLBACKS)
ffibuilder.set_source(
    "modpack._rt",
    BINDING_SOURCE,
    # Relative paths: setuptools builds from the project root and refuses absolute ones.
    sources=sorted(f"csrc/src/{p.name}" for p in (CSRC / "src").glob("*.c")),
    include_dirs=["csrc/include"],
    extra_compile_args=["-std=c11", "-O2", "-Wall", "-Wextra"],
    libraries=["dl", "pthread"],
)

if __name__ == "__main__":
    ffibuilder.compile(tmpdir=str(ROOT / "build" / "cffi"), verbose=True)
