/* The binding's own C, compiled into modpack._rt together with the runtime (unlike csrc/, it
 * may use Python's C API): the DLPack capsule destructor, the warm-up probe, and the fast
 * call path. Read by build_ffi.py, which puts the public headers' includes in front. */

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

/* ---- the fast call path ------------------------------------------------------------------
 * Function.__call__ hands its arguments here. Ints, floats, None, str, numpy arrays (through
 * the buffer protocol, no copy) and modpack arrays are turned into tagged values in C and the
 * call runs without the GIL. Anything else returns the `unsupported` sentinel before calling,
 * and Python's general path (DLPack objects and the rest) takes over. A failed call returns
 * the `failed` sentinel; the message is in the runtime's per-thread error slot. */

enum { FAST_MAX_ARGS = 16, FAST_MAX_NDIM = 32 };

static PyObject* fast_failed;      /* sentinels and types, set once by modpack_fast_call_init */
static PyObject* fast_unsupported;
static PyObject* fast_ndarray_type;
static PyObject* fast_array_type;  /* modpack.Array: its `_address` is its DLTensor* */
static PyObject* fast_address_name;

typedef struct {
  DLTensor tensor;
  Py_buffer view;
  int has_view;
  int64_t shape[FAST_MAX_NDIM];
  int64_t strides[FAST_MAX_NDIM];
} fast_array_t;

/* DLPack dtype for a buffer-protocol format; 0 bits when it has none. */
static DLDataType fast_dtype(const char* format, Py_ssize_t itemsize) {
  DLDataType none = {0, 0, 0};
  if (*format == '<' || *format == '=' || *format == '@') ++format;
  if (*format == '>' || *format == '!') return none;
  uint8_t bits = (uint8_t)(itemsize * 8);
  char c = format[0];
  if (format[1] != '\0' && !(c == 'Z' && format[2] == '\0')) return none;
  switch (c) {
    case '?': return (DLDataType){kDLBool, 8, 1};
    case 'b': case 'h': case 'i': case 'l': case 'q': return (DLDataType){kDLInt, bits, 1};
    case 'B': case 'H': case 'I': case 'L': case 'Q': return (DLDataType){kDLUInt, bits, 1};
    case 'e': case 'f': case 'd': return (DLDataType){kDLFloat, bits, 1};
    case 'Z': return format[1] == 'f' || format[1] == 'd' ? (DLDataType){kDLComplex, bits, 1} : none;
    default: return none;
  }
}

/* 1: converted; 0: not something the fast path handles; -1: a Python error is set. */
static int fast_value(PyObject* obj, mp_value_t* out, fast_array_t* array) {
  PyTypeObject* type = Py_TYPE(obj);
  out->flags = 0;
  if (type == &PyLong_Type || type == &PyBool_Type) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (v == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return 0; /* the general path reports it */
    }
    out->type_code = MP_TYPE_INT;
    out->v_int64 = v;
    return 1;
  }
  if (type == &PyFloat_Type) {
    out->type_code = MP_TYPE_FLOAT;
    out->v_float64 = PyFloat_AS_DOUBLE(obj);
    return 1;
  }
  if (obj == Py_None) {
    out->type_code = MP_TYPE_NONE;
    out->v_int64 = 0;
    return 1;
  }
  if (type == &PyUnicode_Type) {
    const char* text = PyUnicode_AsUTF8(obj); /* lives as long as the str */
    if (!text) return -1;
    out->type_code = MP_TYPE_STR;
    out->v_str = text;
    return 1;
  }
  if ((PyObject*)type == fast_array_type) {
    PyObject* address = PyObject_GetAttr(obj, fast_address_name);
    if (!address) return -1;
    out->type_code = MP_TYPE_DLTENSOR;
    out->v_tensor = (DLTensor*)PyLong_AsVoidPtr(address);
    Py_DECREF(address);
    return out->v_tensor ? 1 : -1;
  }
  if ((PyObject*)type != fast_ndarray_type) return 0;
  if (PyObject_GetBuffer(obj, &array->view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    return 0;
  }
  array->has_view = 1;
  Py_buffer* v = &array->view;
  DLDataType dtype = fast_dtype(v->format ? v->format : "B", v->itemsize);
  if (dtype.bits == 0 || v->ndim > FAST_MAX_NDIM) return 0;
  int compact = PyBuffer_IsContiguous(v, 'C');
  for (int d = 0; d < v->ndim; ++d) {
    array->shape[d] = v->shape[d];
    if (!compact) {
      if (v->strides[d] % v->itemsize != 0) return 0;
      array->strides[d] = v->strides[d] / v->itemsize;
    }
  }
  array->tensor = (DLTensor){v->buf,       {kDLCPU, 0}, v->ndim, dtype, array->shape,
                             compact ? NULL : array->strides, 0};
  if (v->ndim == 0) array->shape[0] = 1;
  out->type_code = MP_TYPE_DLTENSOR;
  out->flags = v->readonly ? MP_VALUE_READ_ONLY : 0;
  out->v_tensor = &array->tensor;
  return 1;
}

static PyObject* fast_result(const mp_value_t* ret) {
  switch (ret->type_code) {
    case MP_TYPE_NONE: Py_RETURN_NONE;
    case MP_TYPE_INT: return PyLong_FromLongLong(ret->v_int64);
    case MP_TYPE_FLOAT: return PyFloat_FromDouble(ret->v_float64);
    case MP_TYPE_STR: return ret->v_str ? PyUnicode_FromString(ret->v_str) : Py_NewRef(Py_None);
    case MP_TYPE_HANDLE: return PyLong_FromVoidPtr(ret->v_handle);
    case MP_TYPE_FUNCTION: /* (address,): Python wraps it in a Function */
      mp_function_retain(ret->v_handle);
      return Py_BuildValue("(N)", PyLong_FromVoidPtr(ret->v_handle));
    default:
      return PyErr_Format(PyExc_TypeError, "a function returned an unsupported value type %d",
                          (int)ret->type_code);
  }
}

/* fast_call(function_address, *args) */
static PyObject* modpack_fast_call(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs < 1 || nargs - 1 > FAST_MAX_ARGS) return Py_NewRef(fast_unsupported);
  mp_function_t* function = (mp_function_t*)PyLong_AsVoidPtr(args[0]);
  if (!function) return NULL;
  int32_t n = (int32_t)(nargs - 1);
  mp_value_t values[FAST_MAX_ARGS + 1];
  fast_array_t arrays[FAST_MAX_ARGS];
  PyObject* result = NULL;
  int32_t converted = 0;
  for (; converted < n; ++converted) {
    arrays[converted].has_view = 0;
    int ok = fast_value(args[converted + 1], &values[converted], &arrays[converted]);
    if (ok <= 0) {
      result = ok == 0 ? Py_NewRef(fast_unsupported) : NULL;
      ++converted; /* its view, if any, is released below */
      goto done;
    }
  }
  mp_status_t status;
  Py_BEGIN_ALLOW_THREADS status = mp_function_call(function, values, n, &values[n]);
  Py_END_ALLOW_THREADS result = status == MP_OK ? fast_result(&values[n]) : Py_NewRef(fast_failed);
done:
  for (int32_t i = 0; i < converted; ++i)
    if (arrays[i].has_view) PyBuffer_Release(&arrays[i].view);
  return result;
}

/* fast_lookup(module_address, name, query_imports) -> the address of a new function
 * reference, or the `failed` sentinel (the message is in the error slot). */
static PyObject* modpack_fast_lookup(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 3) return PyErr_Format(PyExc_TypeError, "fast_lookup takes 3 arguments");
  mp_module_t* owner = (mp_module_t*)PyLong_AsVoidPtr(args[0]);
  const char* name = PyUnicode_AsUTF8(args[1]);
  int query_imports = PyObject_IsTrue(args[2]);
  if (!owner || !name || query_imports < 0) return NULL;
  mp_function_t* function = NULL;
  mp_status_t status;
  Py_BEGIN_ALLOW_THREADS status = mp_module_get_function(owner, name, query_imports, &function);
  Py_END_ALLOW_THREADS return status == MP_OK ? PyLong_FromVoidPtr(function)
                                              : Py_NewRef(fast_failed);
}

static PyMethodDef fast_call_def = {"fast_call", (PyCFunction)(void (*)(void))modpack_fast_call,
                                    METH_FASTCALL, "Call an mp_function_t (see binding.c)."};
static PyMethodDef fast_lookup_def = {"fast_lookup",
                                      (PyCFunction)(void (*)(void))modpack_fast_lookup,
                                      METH_FASTCALL, "Look up an mp_function_t by name."};

/* Returns a new reference to the tuple (fast_call, fast_lookup); the arguments are borrowed
 * PyObject*s, kept for the life of the process. (cffi calls C without the GIL: take it.) */
uintptr_t modpack_fast_call_init(uintptr_t failed, uintptr_t unsupported, uintptr_t ndarray,
                                 uintptr_t array) {
  PyGILState_STATE gil = PyGILState_Ensure();
  fast_failed = Py_NewRef((PyObject*)failed);
  fast_unsupported = Py_NewRef((PyObject*)unsupported);
  fast_ndarray_type = Py_NewRef((PyObject*)ndarray);
  fast_array_type = Py_NewRef((PyObject*)array);
  fast_address_name = PyUnicode_InternFromString("_address");
  PyObject* functions = Py_BuildValue("(NN)", PyCFunction_New(&fast_call_def, NULL),
                                      PyCFunction_New(&fast_lookup_def, NULL));
  PyGILState_Release(gil);
  return (uintptr_t)functions;
}
