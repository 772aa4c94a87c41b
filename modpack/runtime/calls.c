/* modpack.runtime._calls: the one path from Python values to the packed calling convention, and
 * modpack.Function, the type of the functions it calls.
 *
 * A Function is a C object holding its mp_function_t; calling one goes straight from Python's
 * vectorcall into the conversion below, with no Python frame, attribute lookup or argument tuple
 * in between (the cost of a call that itself takes nanoseconds). Every call from Python goes
 * through call_function(): ints, floats, None, str, modpack arrays and
 * functions, numpy arrays (in place: read from numpy's array struct, or through the buffer
 * protocol) and DLPack capsules (legacy
 * "dltensor" and DLPack 1.x "dltensor_versioned", whose read-only flag is kept) become
 * tagged values here, and the call runs without the GIL. What this file cannot take as it is
 * (a numpy scalar, an object with __dlpack__, a bfloat16 array, an int past 64 bits, ...) is
 * handed once to the Python `normalize(value, index)` given to init(), which either returns a
 * form this file takes (an int, a float, a DLPack capsule, or (array view, (code, bits,
 * lanes))) or raises the error that names the argument. dtypes come from one table
 * (modpack/runtime/dtypes.py), given to init() as buffer format -> (code, bits, lanes).
 * Errors raised here are modpack's own (modpack/errors.py): ArgumentError for what a caller
 * passed, InternalError for what only a bug in modpack reaches. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stdarg.h>
#include <string.h>

#include "calls_api.h"

enum { STACK_ARGS = 16, MAX_NDIM = 32 };

static const modpack_calls_api_t* api; /* from init() */
static PyObject* array_type;           /* modpack.Array: `_address` is its DLTensor* */
static PyObject* local_memory_type;    /* modpack.local_memory(): `nbytes` */
static PyObject* ndarray_type;
static PyObject* buffer_formats; /* dict: buffer format -> (code, bits, lanes) */
static PyObject* normalize;      /* normalize(value, index) -> a form convert() takes */
static PyObject* make_error;     /* make_error(status) -> the exception for a failed call */
static PyObject* argument_error; /* modpack.ArgumentError */
static PyObject* internal_error; /* modpack.InternalError */
static PyObject* address_name;

/* An array argument described in place: the DLTensor and what keeps it valid. */
typedef struct {
  DLTensor tensor;
  Py_buffer view;
  int has_view;
  int64_t shape[MAX_NDIM];
  int64_t strides[MAX_NDIM];
} arg_array_t;

/* Raise modpack.InternalError (a bug in modpack, not in the caller's arguments), also before
 * init() has run. Returns NULL. */
static PyObject* internal(const char* format, ...) {
  PyObject* type = internal_error ? Py_NewRef(internal_error) : NULL;
  if (!type) {
    PyObject* errors = PyImport_ImportModule("modpack.errors");
    if (!errors) return NULL;
    type = PyObject_GetAttrString(errors, "InternalError");
    Py_DECREF(errors);
    if (!type) return NULL;
  }
  va_list args;
  va_start(args, format);
  PyObject* message = PyUnicode_FromFormatV(format, args);
  va_end(args);
  if (message) {
    PyErr_SetObject(type, message);
    Py_DECREF(message);
  }
  Py_DECREF(type);
  return NULL;
}

/* modpack.Function: one runtime reference to an mp_function_t, and the name it was found by. */
typedef struct {
  PyObject_HEAD
  vectorcallfunc vectorcall;
  mp_function_t* function;
  PyObject* name;
  PyObject* weakrefs;
} FunctionObject;

static PyTypeObject FunctionType;
static PyObject* function_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                                     PyObject* kwnames);

/* A Function taking over one reference to |function|. */
static PyObject* new_function(mp_function_t* function, PyObject* name) {
  FunctionObject* self = PyObject_GC_New(FunctionObject, &FunctionType);
  if (!self) {
    api->function_release(function);
    return NULL;
  }
  self->vectorcall = function_vectorcall;
  self->function = function;
  self->name = Py_NewRef(name);
  self->weakrefs = NULL;
  PyObject_GC_Track(self);
  return (PyObject*)self;
}

static int address_of(PyObject* obj, void** out) {
  PyObject* address = PyObject_GetAttr(obj, address_name);
  if (!address) return -1;
  *out = PyLong_AsVoidPtr(address);
  Py_DECREF(address);
  return *out || !PyErr_Occurred() ? 0 : -1;
}

/* A (code, bits, lanes) tuple as a DLDataType; 0 (no Python error set) when it is not one. */
static int dtype_of_tuple(PyObject* dtype, DLDataType* out) {
  unsigned int code, bits, lanes;
  if (!PyArg_ParseTuple(dtype, "III", &code, &bits, &lanes)) {
    PyErr_Clear();
    return 0;
  }
  *out = (DLDataType){(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
  return 1;
}

/* The DLDataType of a buffer format ("<f", "d", "?", ...), from the one dtype table
 * (buffer_formats, made by dtypes.py), remembered for the few formats a program passes: a
 * call looks its arrays' formats up without making a str or parsing a tuple. */
enum { FORMAT_CACHE = 8, FORMAT_MAX = 8 };
static struct {
  char format[FORMAT_MAX];
  DLDataType dtype;
} format_cache[FORMAT_CACHE];
static int format_cache_used;

static int dtype_of_format(const char* format, DLDataType* out) {
  for (int i = 0; i < format_cache_used; ++i)
    if (strcmp(format_cache[i].format, format) == 0) {
      *out = format_cache[i].dtype;
      return 1;
    }
  PyObject* dtype = PyDict_GetItemString(buffer_formats, format);
  if (!dtype || !dtype_of_tuple(dtype, out)) return 0;
  if (strlen(format) < FORMAT_MAX) { /* the GIL is held: no race on the cache */
    int slot = format_cache_used < FORMAT_CACHE ? format_cache_used++ : FORMAT_CACHE - 1;
    strcpy(format_cache[slot].format, format);
    format_cache[slot].dtype = *out;
  }
  return 1;
}

/* |obj|'s buffer as a CPU DLTensor of |dtype| (code, bits, lanes). 1: done; 0: not possible
 * this way (no Python error set); -1: a Python error. */
static int buffer_tensor(PyObject* obj, PyObject* dtype, mp_value_t* out, arg_array_t* array) {
  if (PyObject_GetBuffer(obj, &array->view, PyBUF_RECORDS_RO) != 0) {
    PyErr_Clear();
    return 0;
  }
  array->has_view = 1;
  Py_buffer* v = &array->view;
  DLDataType dl;
  if (!(dtype ? dtype_of_tuple(dtype, &dl) : dtype_of_format(v->format ? v->format : "B", &dl)))
    return 0;
  if (v->ndim > MAX_NDIM) return 0;
  int compact = PyBuffer_IsContiguous(v, 'C');
  for (int d = 0; d < v->ndim; ++d) {
    array->shape[d] = v->shape[d];
    if (!compact) {
      if (v->strides[d] % v->itemsize != 0) return 0;
      array->strides[d] = v->strides[d] / v->itemsize;
    }
  }
  if (v->ndim == 0) array->shape[0] = 1; /* a DLTensor's shape is never NULL */
  array->tensor = (DLTensor){
      v->buf, {kDLCPU, 0}, v->ndim, dl, array->shape, compact ? NULL : array->strides, 0};
  out->type_code = MP_TYPE_DLTENSOR;
  out->flags = v->readonly ? MP_VALUE_READ_ONLY : 0;
  out->v_tensor = &array->tensor;
  return 1;
}

/* numpy arrays read in place, as numpy's C ABI lays them out: the head of PyArrayObject_fields
 * and of PyArray_Descr (numpy/ndarraytypes.h), the same in numpy 1.x and 2.x, which is what lets
 * an extension built against one run with the other. This skips the buffer protocol, which
 * builds a format string per array per call: about 100 ns of a 200 ns call with two arrays.
 * numpy_in_place() checks the layout against a real array first; until it has, or if the
 * layout differs, arrays go through the buffer protocol as before. */
typedef struct {
  PyObject_HEAD
  char* data;
  int nd;
  Py_ssize_t* dimensions;
  Py_ssize_t* strides;
  PyObject* base;
  PyObject* descr;
  int flags;
} numpy_array_abi_t;
typedef struct {
  PyObject_HEAD
  PyTypeObject* typeobj;
  char kind, type, byteorder, former_flags;
  int type_num;
} numpy_descr_abi_t;
enum { NUMPY_C_CONTIGUOUS = 0x0001, NUMPY_WRITEABLE = 0x0400, NUMPY_TYPES = 32 };
static int numpy_layout_checked;
static struct {
  DLDataType dtype; /* bits 0: not taken in place (the buffer protocol decides) */
  int64_t itemsize;
} numpy_types[NUMPY_TYPES]; /* by numpy type number */

/* |obj| (a numpy array) as a CPU DLTensor, read in place. 1: done; 0: not possible this way. */
static int numpy_tensor(PyObject* obj, mp_value_t* out, arg_array_t* array) {
  const numpy_array_abi_t* a = (const numpy_array_abi_t*)obj;
  const numpy_descr_abi_t* descr = (const numpy_descr_abi_t*)a->descr;
  if (descr->type_num < 0 || descr->type_num >= NUMPY_TYPES) return 0;
  if (descr->byteorder != '=' && descr->byteorder != '|') return 0; /* swapped: not here */
  DLDataType dl = numpy_types[descr->type_num].dtype;
  int64_t itemsize = numpy_types[descr->type_num].itemsize;
  if (dl.bits == 0 || a->nd < 0 || a->nd > MAX_NDIM) return 0;
  int compact = a->flags & NUMPY_C_CONTIGUOUS;
  for (int d = 0; d < a->nd; ++d) {
    array->shape[d] = a->dimensions[d];
    if (!compact) {
      if (a->strides[d] % itemsize != 0) return 0;
      array->strides[d] = a->strides[d] / itemsize;
    }
  }
  if (a->nd == 0) array->shape[0] = 1; /* a DLTensor's shape is never NULL */
  array->tensor = (DLTensor){
      a->data, {kDLCPU, 0}, a->nd, dl, array->shape, compact ? NULL : array->strides, 0};
  out->type_code = MP_TYPE_DLTENSOR;
  out->flags = a->flags & NUMPY_WRITEABLE ? 0 : MP_VALUE_READ_ONLY;
  out->v_tensor = &array->tensor;
  return 1;
}

/* numpy_in_place(types, probe, expected) -> bool: takes numpy arrays in place from now on if
 * |probe| (a numpy array) reads through the layout above as |expected| says (else no longer): (data address,
 * shape, strides, type number, byte order, writeable, C-contiguous). |types|: type number ->
 * (code, bits, lanes, itemsize), the dtypes whose arrays are taken in place. */
static PyObject* calls_numpy_in_place(PyObject* module, PyObject* args) {
  (void)module;
  PyObject *types, *probe, *expected;
  if (!PyArg_ParseTuple(args, "O!OO!", &PyDict_Type, &types, &probe, &PyTuple_Type, &expected))
    return NULL;
  if (!ndarray_type || !PyObject_TypeCheck(probe, (PyTypeObject*)ndarray_type))
    return internal("numpy_in_place() before init(), or of a probe that is not an array");
  unsigned long long address;
  PyObject *shape, *strides;
  int type_num, byteorder, writeable, contiguous;
  if (!PyArg_ParseTuple(expected, "KO!O!iCpp", &address, &PyTuple_Type, &shape, &PyTuple_Type,
                        &strides, &type_num, &byteorder, &writeable, &contiguous))
    return NULL;
  const numpy_array_abi_t* a = (const numpy_array_abi_t*)probe;
  const numpy_descr_abi_t* descr = (const numpy_descr_abi_t*)a->descr;
  int same = (uintptr_t)a->data == (uintptr_t)address && a->nd == PyTuple_GET_SIZE(shape) &&
             a->nd == PyTuple_GET_SIZE(strides) && descr && descr->type_num == type_num &&
             descr->byteorder == byteorder && !(a->flags & NUMPY_WRITEABLE) == !writeable &&
             !(a->flags & NUMPY_C_CONTIGUOUS) == !contiguous;
  for (int d = 0; same && d < a->nd; ++d)
    same = a->dimensions[d] == PyLong_AsSsize_t(PyTuple_GET_ITEM(shape, d)) &&
           a->strides[d] == PyLong_AsSsize_t(PyTuple_GET_ITEM(strides, d));
  if (PyErr_Occurred()) return NULL;
  numpy_layout_checked = 0; /* the latest probe decides */
  if (!same) Py_RETURN_FALSE;
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (PyDict_Next(types, &pos, &key, &value)) {
    long number = PyLong_AsLong(key);
    unsigned code, bits, lanes;
    long long itemsize;
    if (number == -1 && PyErr_Occurred()) return NULL;
    if (!PyArg_ParseTuple(value, "IIIL", &code, &bits, &lanes, &itemsize)) return NULL;
    if (number < 0 || number >= NUMPY_TYPES || itemsize <= 0) continue;
    numpy_types[number].dtype = (DLDataType){(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
    numpy_types[number].itemsize = itemsize;
  }
  numpy_layout_checked = 1;
  Py_RETURN_TRUE;
}

/* array_digest(array) -> int | None: XXH3-64 of the bytes of a numpy array a const module can
 * take as it is (exactly an ndarray, C-contiguous, of a standard native-endian dtype), read in
 * place: xxhash.xxh3_64_intdigest(array.data) without the buffer protocol, whose format string
 * took most of a const module's build. None for anything else (the caller goes the long way). */
static PyObject* calls_array_digest(PyObject* module, PyObject* obj) {
  (void)module;
  if (!api || !numpy_layout_checked || Py_TYPE(obj) != (PyTypeObject*)ndarray_type)
    Py_RETURN_NONE;
  const numpy_array_abi_t* a = (const numpy_array_abi_t*)obj;
  const numpy_descr_abi_t* descr = (const numpy_descr_abi_t*)a->descr;
  if (!(a->flags & NUMPY_C_CONTIGUOUS) || descr->type_num < 0 || descr->type_num >= NUMPY_TYPES ||
      numpy_types[descr->type_num].itemsize <= 0 || a->nd < 0 ||
      (descr->byteorder != '=' && descr->byteorder != '|'))
    Py_RETURN_NONE; /* a dtype the probe did not give, or byte-swapped */
  uint64_t size = (uint64_t)numpy_types[descr->type_num].itemsize;
  for (int d = 0; d < a->nd; ++d) {
    if (a->dimensions[d] < 0 || __builtin_mul_overflow(size, (uint64_t)a->dimensions[d], &size))
      Py_RETURN_NONE;
  }
  mp_const_byte_span_t bytes = {(const uint8_t*)a->data, size};
  uint64_t digest;
  if (size >= (1u << 20)) { /* long enough to let other threads run meanwhile */
    Py_BEGIN_ALLOW_THREADS
    digest = api->checksum(bytes);
    Py_END_ALLOW_THREADS
  } else {
    digest = api->checksum(bytes);
  }
  return PyLong_FromUnsignedLongLong(digest);
}

/* The tensor of a DLPack capsule not yet consumed, legacy ("dltensor") or versioned
 * ("dltensor_versioned", DLPack 1.x: its read-only flag becomes MP_VALUE_READ_ONLY in
 * |*flags|). NULL with no Python error for another capsule; NULL with ArgumentError for a
 * versioned tensor of another major version, or of a sub-byte type its producer padded
 * (modpack/tensor_span.h takes them packed) (argument |index|). */
static DLTensor* capsule_tensor(PyObject* capsule, int index, int* versioned, int32_t* flags) {
  *versioned = 0;
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    DLManagedTensor* managed = PyCapsule_GetPointer(capsule, "dltensor");
    return managed ? &managed->dl_tensor : NULL;
  }
  if (!PyCapsule_IsValid(capsule, "dltensor_versioned")) return NULL;
  DLManagedTensorVersioned* managed = PyCapsule_GetPointer(capsule, "dltensor_versioned");
  if (!managed) return NULL;
  if (managed->version.major != DLPACK_MAJOR_VERSION) {
    if (!argument_error) {
      internal("modpack.runtime._calls is not initialised");
      return NULL;
    }
    PyObject* type = argument_error;
    unsigned major = managed->version.major, minor = managed->version.minor;
    PyErr_Format(type, "argument %d: a DLPack %u.%u tensor: modpack reads DLPack %d.x", index,
                 major, minor, DLPACK_MAJOR_VERSION);
    return NULL;
  }
  DLDataType dtype = managed->dl_tensor.dtype;
  if ((managed->flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) &&
      (unsigned)dtype.bits * dtype.lanes < 8) {
    if (!argument_error) {
      internal("modpack.runtime._calls is not initialised");
      return NULL;
    }
    PyErr_Format(argument_error,
                 "argument %d: its producer marks the array padded (one %u-bit value per byte, "
                 "DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED; dtype code %u), but modpack takes "
                 "sub-byte types packed, DLPack's default (two 4-bit values per byte): pass "
                 "packed data, or its bytes as uint8",
                 index, (unsigned)dtype.bits, (unsigned)dtype.code);
    return NULL;
  }
  *versioned = 1;
  if (managed->flags & DLPACK_FLAG_BITMASK_READ_ONLY) *flags |= MP_VALUE_READ_ONLY;
  return &managed->dl_tensor;
}

/* Fill |out| from |obj| (argument |index|). |keep| receives a new reference to whatever must
 * outlive the call (a normalised replacement). Returns 0, or -1 with a Python error. */
static int convert(PyObject* obj, int index, mp_value_t* out, arg_array_t* array, PyObject** keep,
                   int normalised) {
  PyTypeObject* type = Py_TYPE(obj);
  out->flags = 0;
  if (type == &PyLong_Type || type == &PyBool_Type) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (!overflow && !(v == -1 && PyErr_Occurred())) {
      out->type_code = MP_TYPE_INT;
      out->v_int64 = v;
      return 0;
    }
    PyErr_Clear(); /* normalize() names the argument */
  } else if (type == &PyFloat_Type) {
    out->type_code = MP_TYPE_FLOAT;
    out->v_float64 = PyFloat_AS_DOUBLE(obj);
    return 0;
  } else if (obj == Py_None) {
    out->type_code = MP_TYPE_NONE;
    out->v_int64 = 0;
    return 0;
  } else if (type == &PyUnicode_Type) {
    Py_ssize_t size;
    const char* text = PyUnicode_AsUTF8AndSize(obj, &size); /* lives as long as the str */
    if (!text) return -1;
    if ((size_t)size == strlen(text)) {
      out->type_code = MP_TYPE_STR;
      out->v_str = text;
      return 0;
    }
  } else if ((PyObject*)type == array_type) {
    out->type_code = MP_TYPE_DLTENSOR;
    if (address_of(obj, (void**)&out->v_tensor) != 0) return -1;
    if (api->array_flags(out->v_tensor) & MP_ARRAY_READ_ONLY) out->flags = MP_VALUE_READ_ONLY;
    return 0;
  } else if (type == &FunctionType) {
    out->type_code = MP_TYPE_FUNCTION;
    out->v_handle = ((FunctionObject*)obj)->function;
    return 0;
  } else if ((PyObject*)type == local_memory_type) {
    PyObject* nbytes = PyObject_GetAttrString(obj, "nbytes");
    if (!nbytes) return -1;
    out->type_code = MP_TYPE_LOCAL_MEMORY;
    out->v_int64 = PyLong_AsLongLong(nbytes);
    Py_DECREF(nbytes);
    return out->v_int64 == -1 && PyErr_Occurred() ? -1 : 0;
  } else if (type == &PyCapsule_Type) {
    /* Borrowed for the call: the capsule keeps ownership, and its destructor runs the
     * producer's deleter when the capsule goes. */
    int versioned;
    DLTensor* tensor = capsule_tensor(obj, index, &versioned, &out->flags);
    if (tensor) {
      out->type_code = MP_TYPE_DLTENSOR;
      out->v_tensor = tensor;
      return 0;
    }
    if (PyErr_Occurred()) return -1;
  } else if (PyObject_TypeCheck(obj, (PyTypeObject*)ndarray_type)) {
    if (numpy_layout_checked && numpy_tensor(obj, out, array)) return 0;
    int done = buffer_tensor(obj, NULL, out, array);
    if (done != 0) return done > 0 ? 0 : -1;
    if (array->has_view) {
      PyBuffer_Release(&array->view);
      array->has_view = 0;
    }
  } else if (normalised && PyTuple_CheckExact(obj) && PyTuple_GET_SIZE(obj) == 2) {
    int done = buffer_tensor(PyTuple_GET_ITEM(obj, 0), PyTuple_GET_ITEM(obj, 1), out, array);
    if (done != 0) return done > 0 ? 0 : -1;
  }
  if (normalised) { /* normalize() raises for whatever it cannot turn into a usable form */
    internal("argument %d: normalize() returned an unusable %s", index, type->tp_name);
    return -1;
  }
  PyObject* replacement = PyObject_CallFunction(normalize, "Oi", obj, index);
  if (!replacement) return -1;
  *keep = replacement;
  return convert(replacement, index, out, array, keep, 1);
}

static PyObject* result_of(const mp_value_t* ret) {
  switch (ret->type_code) {
    case MP_TYPE_NONE:
      Py_RETURN_NONE;
    case MP_TYPE_INT:
      return PyLong_FromLongLong(ret->v_int64);
    case MP_TYPE_FLOAT:
      return PyFloat_FromDouble(ret->v_float64);
    case MP_TYPE_STR:
      return ret->v_str ? PyUnicode_FromString(ret->v_str) : Py_NewRef(Py_None);
    case MP_TYPE_HANDLE:
      return PyLong_FromVoidPtr(ret->v_handle);
    case MP_TYPE_FUNCTION: { /* the caller's reference: the Function object takes it over */
      api->function_retain(ret->v_handle);
      PyObject* name = PyUnicode_FromString("<returned>");
      PyObject* result = name ? new_function(ret->v_handle, name) : NULL;
      Py_XDECREF(name);
      return result;
    }
    default:
      return internal("a function returned a value of unknown type code %d",
                      (int)ret->type_code);
  }
}

static PyObject* raise_status(mp_status_t status) {
  PyObject* exc = PyObject_CallFunction(make_error, "i", (int)status);
  if (!exc) return NULL;
  PyErr_SetObject((PyObject*)Py_TYPE(exc), exc);
  Py_DECREF(exc);
  return NULL;
}

/* Call |function| with the |n| Python values at |args|. */
static PyObject* call_function(mp_function_t* function, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs > INT32_MAX / 2)
    return PyErr_Format(argument_error, "%zd arguments: at most %d", nargs, INT32_MAX / 2);
  int32_t n = (int32_t)nargs;
  mp_value_t stack_values[STACK_ARGS + 1];
  arg_array_t stack_arrays[STACK_ARGS];
  PyObject* stack_keep[STACK_ARGS];
  mp_value_t* values = stack_values;
  arg_array_t* arrays = stack_arrays;
  PyObject** keep = stack_keep;
  if (n > STACK_ARGS) {
    values = PyMem_Calloc((size_t)n + 1, sizeof *values);
    arrays = PyMem_Calloc((size_t)n, sizeof *arrays);
    keep = PyMem_Calloc((size_t)n, sizeof *keep);
    if (!values || !arrays || !keep) {
      PyMem_Free(values), PyMem_Free(arrays), PyMem_Free(keep);
      return PyErr_NoMemory();
    }
  }
  PyObject* result = NULL;
  int32_t converted = 0;
  for (; converted < n; ++converted) {
    arrays[converted].has_view = 0;
    keep[converted] = NULL;
    if (convert(args[converted], converted, &values[converted], &arrays[converted],
                &keep[converted], 0) != 0) {
      ++converted; /* its view and replacement, if any, are released below */
      goto done;
    }
  }
  mp_status_t status;
  Py_BEGIN_ALLOW_THREADS;
  status = api->function_call(function, values, n, &values[n]);
  Py_END_ALLOW_THREADS;
  result = status == MP_OK ? result_of(&values[n]) : raise_status(status);
done:
  for (int32_t i = 0; i < converted; ++i) {
    if (arrays[i].has_view) PyBuffer_Release(&arrays[i].view);
    Py_XDECREF(keep[i]);
  }
  if (values != stack_values) PyMem_Free(values), PyMem_Free(arrays), PyMem_Free(keep);
  return result;
}

/* Function(*args): Python's vectorcall lands here directly. */
static PyObject* function_vectorcall(PyObject* self, PyObject* const* args, size_t nargsf,
                                     PyObject* kwnames) {
  if (kwnames && PyTuple_GET_SIZE(kwnames) > 0)
    return PyErr_Format(argument_error, "%U takes positional arguments only",
                        ((FunctionObject*)self)->name);
  return call_function(((FunctionObject*)self)->function, args, PyVectorcall_NARGS(nargsf));
}

static void function_dealloc(PyObject* self) {
  FunctionObject* f = (FunctionObject*)self;
  PyObject_GC_UnTrack(self);
  if (f->weakrefs) PyObject_ClearWeakRefs(self);
  if (f->function && api) api->function_release(f->function);
  Py_XDECREF(f->name);
  PyObject_GC_Del(self);
}

static int function_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(((FunctionObject*)self)->name);
  return 0;
}

static PyObject* function_repr(PyObject* self) {
  return PyUnicode_FromFormat("<modpack.Function %U>", ((FunctionObject*)self)->name);
}

static PyObject* function_address(PyObject* self, void* closure) {
  (void)closure;
  return PyLong_FromVoidPtr(((FunctionObject*)self)->function);
}

/* Function._from_address(address, name="<returned>"): a Function taking over the reference
 * at |address| (for functions the runtime hands to Python callbacks). */
static PyObject* function_from_address(PyObject* cls, PyObject* const* args, Py_ssize_t nargs) {
  (void)cls;
  if (nargs < 1 || nargs > 2) return internal("_from_address(address, name=...)");
  mp_function_t* function = PyLong_AsVoidPtr(args[0]);
  if (!function) return PyErr_Occurred() ? NULL : internal("_from_address of NULL");
  PyObject* name = nargs == 2 ? Py_NewRef(args[1]) : PyUnicode_FromString("<returned>");
  if (!name) return NULL;
  PyObject* result = new_function(function, name);
  Py_DECREF(name);
  return result;
}

static PyMemberDef function_members[] = {
    {"name", T_OBJECT, offsetof(FunctionObject, name), READONLY, "the name it was found by"},
    {"__weaklistoffset__", T_PYSSIZET, offsetof(FunctionObject, weakrefs), READONLY, NULL},
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(FunctionObject, vectorcall), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef function_getset[] = {
    {"_address", function_address, NULL, "the mp_function_t*, as an int", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef function_methods[] = {
    {"_from_address", (PyCFunction)(void (*)(void))function_from_address,
     METH_FASTCALL | METH_CLASS, "A Function taking over the reference at an address."},
    {NULL, NULL, 0, NULL},
};

#ifndef Py_TPFLAGS_HAVE_VECTORCALL
#define Py_TPFLAGS_HAVE_VECTORCALL _Py_TPFLAGS_HAVE_VECTORCALL
#endif

static PyTypeObject FunctionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "modpack.Function",
    .tp_doc = "A function from a loaded module, called with Python scalars and arrays.\n\n"
              "Holds a runtime reference, so the module it came from (and the library its code "
              "lives in) stays loaded for as long as the function object exists.",
    .tp_basicsize = sizeof(FunctionObject),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    /* no tp_new: Function objects come from Module.get_function() */
    .tp_dealloc = function_dealloc,
    .tp_traverse = function_traverse,
    .tp_repr = function_repr,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(FunctionObject, vectorcall),
    .tp_weaklistoffset = offsetof(FunctionObject, weakrefs),
    .tp_members = function_members,
    .tp_getset = function_getset,
    .tp_methods = function_methods,
};

/* call(function, *args) -> the function's result (the same as function(*args)) */
static PyObject* calls_call(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (!api) return internal("modpack.runtime._calls is not initialised");
  if (nargs < 1 || Py_TYPE(args[0]) != &FunctionType) return internal("call() needs a Function");
  return call_function(((FunctionObject*)args[0])->function, args + 1, nargs - 1);
}

/* lookup(module_address, name, query_imports) -> a Function */
static PyObject* calls_lookup(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (!api) return internal("modpack.runtime._calls is not initialised");
  if (nargs != 3) return internal("lookup() takes 3 arguments");
  mp_module_t* owner = PyLong_AsVoidPtr(args[0]);
  if (!PyUnicode_Check(args[1]))
    return PyErr_Format(argument_error, "function names are str, not %s",
                        Py_TYPE(args[1])->tp_name);
  Py_ssize_t size;
  const char* name = PyUnicode_AsUTF8AndSize(args[1], &size);
  int query_imports = PyObject_IsTrue(args[2]);
  if (!owner || !name || query_imports < 0) return NULL;
  if ((size_t)size != strlen(name))
    return PyErr_Format(argument_error, "function name %R contains a NUL character", args[1]);
  mp_function_t* function = NULL;
  mp_status_t status;
  Py_BEGIN_ALLOW_THREADS;
  status = api->module_get_function(owner, name, query_imports, &function);
  Py_END_ALLOW_THREADS;
  return status == MP_OK ? new_function(function, args[1]) : raise_status(status);
}

/* A capsule that a consumer did not take over ("used_..." names the taken) owns its tensor. */
static void capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor") && !PyCapsule_IsValid(capsule, "dltensor_versioned"))
    return; /* a consumer took it over */
  PyObject *type, *value, *traceback;
  PyErr_Fetch(&type, &value, &traceback);
  if (PyCapsule_IsValid(capsule, "dltensor")) {
    DLManagedTensor* managed = PyCapsule_GetPointer(capsule, "dltensor");
    if (managed && managed->deleter) managed->deleter(managed);
  } else {
    DLManagedTensorVersioned* managed = PyCapsule_GetPointer(capsule, "dltensor_versioned");
    if (managed && managed->deleter) managed->deleter(managed);
  }
  PyErr_Clear();
  PyErr_Restore(type, value, traceback);
}

/* dlpack_capsule(managed_tensor_address, versioned) -> a "dltensor" capsule (a
 * DLManagedTensor) or a "dltensor_versioned" one (a DLManagedTensorVersioned) owning it */
static PyObject* calls_dlpack_capsule(PyObject* module, PyObject* const* args, Py_ssize_t nargs) {
  (void)module;
  if (nargs != 2) return internal("dlpack_capsule(address, versioned)");
  void* managed = PyLong_AsVoidPtr(args[0]);
  int versioned = PyObject_IsTrue(args[1]);
  if (!managed || versioned < 0)
    return PyErr_Occurred() ? NULL : internal("dlpack_capsule() of a NULL tensor");
  return PyCapsule_New(managed, versioned ? "dltensor_versioned" : "dltensor",
                       capsule_destructor);
}

/* capsule_tensor(capsule) -> (managed tensor address, versioned): a DLPack capsule's tensor,
 * still the capsule's (None for an object that is no capsule not yet consumed). */
static PyObject* calls_capsule_tensor(PyObject* module, PyObject* capsule) {
  (void)module;
  if (!PyCapsule_CheckExact(capsule)) Py_RETURN_NONE;
  int versioned = PyCapsule_IsValid(capsule, "dltensor_versioned");
  if (!versioned && !PyCapsule_IsValid(capsule, "dltensor")) Py_RETURN_NONE;
  /* The version is the runtime's to check (mp_array_from_dlpack_versioned). */
  void* managed = PyCapsule_GetPointer(capsule, versioned ? "dltensor_versioned" : "dltensor");
  if (!managed) return NULL;
  return Py_BuildValue("(NO)", PyLong_FromVoidPtr(managed), versioned ? Py_True : Py_False);
}

/* capsule_consume(capsule): mark a DLPack capsule taken over (its tensor now has another owner,
 * who runs its deleter), as the protocol says: renamed "used_dltensor[_versioned]". */
static PyObject* calls_capsule_consume(PyObject* module, PyObject* capsule) {
  (void)module;
  const char* name = PyCapsule_IsValid(capsule, "dltensor")             ? "used_dltensor"
                     : PyCapsule_IsValid(capsule, "dltensor_versioned") ? "used_dltensor_versioned"
                                                                        : NULL;
  if (!name) return internal("capsule_consume() of a capsule already used");
  if (PyCapsule_SetName(capsule, name) != 0) return NULL;
  Py_RETURN_NONE;
}

/* init(api_address, Array, LocalMemory, ndarray, buffer_formats, normalize, make_error,
 *      ArgumentError, InternalError); kept for the life of the process. */
static PyObject* calls_init(PyObject* module, PyObject* args) {
  (void)module;
  PyObject* address;
  PyObject *a, *local, *nd, *formats, *norm, *make_err, *arg_err, *int_err;
  if (!PyArg_ParseTuple(args, "OOOOO!OOOO", &address, &a, &local, &nd, &PyDict_Type, &formats,
                        &norm, &make_err, &arg_err, &int_err))
    return NULL;
  const modpack_calls_api_t* table = PyLong_AsVoidPtr(address);
  if (!table) return PyErr_Occurred() ? NULL : internal("init() with a NULL table");
  if (table->size != sizeof *table)
    return PyErr_Format(PyExc_ImportError,
                        "modpack.runtime._calls and modpack._rt were built from different "
                        "sources (table of %u bytes, expected %zu): reinstall modpack",
                        table->size, sizeof *table);
  array_type = Py_NewRef(a);
  local_memory_type = Py_NewRef(local);
  ndarray_type = Py_NewRef(nd);
  buffer_formats = Py_NewRef(formats);
  normalize = Py_NewRef(norm);
  make_error = Py_NewRef(make_err);
  argument_error = Py_NewRef(arg_err);
  internal_error = Py_NewRef(int_err);
  address_name = PyUnicode_InternFromString("_address");
  if (!address_name) return NULL;
  api = table;
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"init", calls_init, METH_VARARGS, "Connect to the runtime (see modpack/runtime/function.py)."},
    {"numpy_in_place", calls_numpy_in_place, METH_VARARGS,
     "numpy_in_place(types, probe, expected): take numpy arrays in place if the layout holds."},
    {"call", (PyCFunction)(void (*)(void))calls_call, METH_FASTCALL,
     "call(function, *args): call a Function with Python arguments."},
    {"lookup", (PyCFunction)(void (*)(void))calls_lookup, METH_FASTCALL,
     "lookup(module_address, name, query_imports): look up an mp_function_t."},
    {"dlpack_capsule", (PyCFunction)(void (*)(void))calls_dlpack_capsule, METH_FASTCALL,
     "dlpack_capsule(managed_tensor_address, versioned): a DLPack capsule owning the tensor."},
    {"capsule_tensor", calls_capsule_tensor, METH_O,
     "capsule_tensor(capsule): (managed tensor address, versioned), or None."},
    {"capsule_consume", calls_capsule_consume, METH_O,
     "capsule_consume(capsule): mark a DLPack capsule taken over."},
    {"array_digest", calls_array_digest, METH_O,
     "array_digest(array): XXH3-64 of a C-contiguous numpy array's bytes, or None."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef calls_module = {
    PyModuleDef_HEAD_INIT,
    "modpack.runtime._calls",
    "The one path from Python values to modpack's calling convention (calls.c).",
    -1,
    methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__calls(void) {
  if (PyType_Ready(&FunctionType) < 0) return NULL;
  PyObject* module = PyModule_Create(&calls_module);
  Py_INCREF(&FunctionType);
  if (module && PyModule_AddObject(module, "Function", (PyObject*)&FunctionType) != 0) {
    Py_DECREF(&FunctionType);
    Py_CLEAR(module);
  }
  /* The most dimensions an array passed by a call may have (values.py names the limit). */
  if (module && PyModule_AddIntConstant(module, "MAX_NDIM", MAX_NDIM) != 0) Py_CLEAR(module);
  /* The DLPack facts Python needs, from the header that defines them. */
  if (module && (PyModule_AddIntConstant(module, "DLPACK_MAJOR_VERSION", DLPACK_MAJOR_VERSION) ||
                 PyModule_AddIntConstant(module, "DLPACK_MINOR_VERSION", DLPACK_MINOR_VERSION) ||
                 PyModule_AddIntConstant(module, "DLPACK_FLAG_READ_ONLY",
                                         (long)DLPACK_FLAG_BITMASK_READ_ONLY) ||
                 PyModule_AddIntConstant(module, "DLPACK_FLAG_IS_COPIED",
                                         (long)DLPACK_FLAG_BITMASK_IS_COPIED)))
    Py_CLEAR(module);
  return module;
}
