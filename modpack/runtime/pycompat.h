/* What the call-path extension (calls.c) uses of Python's C API that CPython 3.9 lacks, defined
 * the way 3.10 defines it. setup.py includes this header before calls.c (-include), so calls.c
 * is written against 3.10's API and builds for 3.9 to 3.13 alike. */
#ifndef MODPACK_PYCOMPAT_H
#define MODPACK_PYCOMPAT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject* Py_NewRef(PyObject* obj) {
  Py_INCREF(obj);
  return obj;
}
static inline PyObject* Py_XNewRef(PyObject* obj) {
  Py_XINCREF(obj);
  return obj;
}
#endif

#endif /* MODPACK_PYCOMPAT_H */
