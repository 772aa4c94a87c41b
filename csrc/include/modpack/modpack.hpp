/*
 * modpack/modpack.hpp — the modpack runtime's C API (modpack/modpack.h) for C++17: handles
 * that own their references, functions called with C++ values, errors as exceptions.
 * Header-only: link the runtime as for C (CMake: find_package(modpack), target
 * modpack::runtime; pkg-config: modpack; a pip-installed modpack: `modpack --cmake-dir`).
 *
 *   #include "modpack/modpack.hpp"
 *
 *   modpack::Module lib = modpack::Module::load("deploy.so");
 *   modpack::Function vadd = lib["vadd"];
 *   vadd(a, b, out);                                   // DLTensor&, DLTensor*, modpack::Array
 *   int64_t five = lib["add_int"].call<int64_t>(2, 3);  // a typed result
 *   const DLTensor* w = lib.get_array("w", true);       // a const module's weights (borrowed)
 *
 * Ownership. Module, Function and Array each hold one runtime reference: copying one retains
 * (both copies share the object), moving one hands the reference over and leaves the source
 * empty, destroying one releases. A Function keeps its module and library loaded, an Array its
 * memory (or the DLPack producer's it adopted), so either may outlive the Module it came from.
 * WeightFile holds one version of a tree's weights (copies share that version). Borrowed
 * pointers (get_array's const DLTensor*, Module::get()) live as long as what they came from.
 *
 * Errors. Every failing runtime call throws a modpack::Error carrying the runtime's status
 * (status()) and its message (what()), as the subclass of its status code: ArgumentError
 * (MP_ERR_INVALID_ARGUMENT), FormatError (MP_ERR_FORMAT) with its subclasses
 * IncompatibleError (MP_ERR_INCOMPATIBLE), SignatureError (MP_ERR_UNTRUSTED) and
 * WeightsMismatchError (MP_ERR_MISMATCH), NotFoundError (MP_ERR_NOT_FOUND),
 * ResourceExhaustedError (MP_ERR_RESOURCE_EXHAUSTED), IOError (MP_ERR_IO), CallError
 * (MP_ERR_RUNTIME), AlreadyExistsError (MP_ERR_ALREADY_EXISTS), UnavailableError
 * (MP_ERR_UNAVAILABLE), InternalError (MP_ERR_INTERNAL) — the classes of the Python package.
 * Using an empty handle, or a result as the wrong type, is an ArgumentError too.
 *
 * Arrays in calls. A `DLTensor*` or non-const `DLTensor&` is passed writable; a
 * `const DLTensor*` or `const DLTensor&` read-only (host functions whose parameter is
 * `DLTensor*` refuse it, `const DLTensor*` ones take it); a modpack::Array as it is (read-only
 * when it is). The caller keeps every argument alive until the call returns.
 *
 * Threads: as the C API: any object may be used from any thread; calls take no lock.
 */
#ifndef MODPACK_MODPACK_HPP_
#define MODPACK_MODPACK_HPP_

#if !defined(__cplusplus) || (__cplusplus < 201703L && !(defined(_MSVC_LANG) && _MSVC_LANG >= 201703L))
#error "modpack/modpack.hpp needs C++17 or newer (C programs include modpack/modpack.h)"
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <iterator>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <vector>

#include "modpack/modpack.h"

namespace modpack {

/* ---- errors -------------------------------------------------------------------------------- */

/* Every error the runtime reports: its status code and message. */
class Error : public std::runtime_error {
 public:
  Error(mp_status_t status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  /* The runtime's status code (MP_ERR_*). */
  mp_status_t status() const noexcept { return status_; }

 private:
  mp_status_t status_;
};

/* A wrong argument count, type or value (MP_ERR_INVALID_ARGUMENT). */
class ArgumentError : public Error {
 public:
  using Error::Error;
};
/* A malformed, truncated or damaged file or blob (MP_ERR_FORMAT). */
class FormatError : public Error {
 public:
  using Error::Error;
};
/* Well-formed, but not for this runtime (MP_ERR_INCOMPATIBLE). */
class IncompatibleError : public FormatError {
 public:
  using FormatError::FormatError;
};
/* Not signed by a trusted key, or changed since it was (MP_ERR_UNTRUSTED). */
class SignatureError : public FormatError {
 public:
  using FormatError::FormatError;
};
/* A valid weight file, but not the one expected (MP_ERR_MISMATCH). */
class WeightsMismatchError : public FormatError {
 public:
  using FormatError::FormatError;
};
/* No such function, array, loader or file (MP_ERR_NOT_FOUND). */
class NotFoundError : public Error {
 public:
  using Error::Error;
};
/* Out of memory (MP_ERR_RESOURCE_EXHAUSTED). */
class ResourceExhaustedError : public Error {
 public:
  using Error::Error;
};
/* The operating system refused: open, read, dlopen (MP_ERR_IO). */
class IOError : public Error {
 public:
  using Error::Error;
};
/* A called function reported a failure (MP_ERR_RUNTIME). */
class CallError : public Error {
 public:
  using Error::Error;
};
/* Something registered twice (MP_ERR_ALREADY_EXISTS). */
class AlreadyExistsError : public Error {
 public:
  using Error::Error;
};
/* A driver or device this needs is missing (MP_ERR_UNAVAILABLE). */
class UnavailableError : public Error {
 public:
  using Error::Error;
};
/* A bug in modpack itself (MP_ERR_INTERNAL). */
class InternalError : public Error {
 public:
  using Error::Error;
};

/* Throw the exception of |status|'s class with |message|. */
[[noreturn]] inline void throw_error(mp_status_t status, const std::string& message) {
  switch (status) {
    case MP_ERR_INVALID_ARGUMENT:
      throw ArgumentError(status, message);
    case MP_ERR_FORMAT:
      throw FormatError(status, message);
    case MP_ERR_NOT_FOUND:
      throw NotFoundError(status, message);
    case MP_ERR_INCOMPATIBLE:
      throw IncompatibleError(status, message);
    case MP_ERR_RESOURCE_EXHAUSTED:
      throw ResourceExhaustedError(status, message);
    case MP_ERR_IO:
      throw IOError(status, message);
    case MP_ERR_RUNTIME:
      throw CallError(status, message);
    case MP_ERR_ALREADY_EXISTS:
      throw AlreadyExistsError(status, message);
    case MP_ERR_UNAVAILABLE:
      throw UnavailableError(status, message);
    case MP_ERR_INTERNAL:
      throw InternalError(status, message);
    case MP_ERR_UNTRUSTED:
      throw SignatureError(status, message);
    case MP_ERR_MISMATCH:
      throw WeightsMismatchError(status, message);
    default:
      throw Error(status, message);
  }
}

/* Throw the calling thread's runtime error if |status| is not MP_OK. */
inline void check(mp_status_t status) {
  if (status == MP_OK) return;
  const char* message = mp_error_message();
  throw_error(status, message && *message
                          ? std::string(message)
                          : "modpack runtime call failed with status " + std::to_string(status));
}

namespace detail {
[[noreturn]] inline void argument_error(const std::string& message) {
  throw ArgumentError(MP_ERR_INVALID_ARGUMENT, message);
}
template <typename T>
inline constexpr bool always_false = false;
}  // namespace detail

/* ---- versions, dtypes, devices ------------------------------------------------------------- */

/* The runtime's version (the one linked, which may be newer than these headers). */
inline mp_version_t runtime_version() {
  mp_version_t version;
  mp_get_version(&version);
  return version;
}

/* The DLPack dtype of a C++ element type: dtype<float>() is float32. */
template <typename T>
constexpr DLDataType dtype() {
  static_assert(std::is_arithmetic_v<T>, "modpack::dtype<T>: T must be a number or bool");
  if constexpr (std::is_same_v<T, bool>) {
    return DLDataType{kDLBool, 8, 1};
  } else if constexpr (std::is_floating_point_v<T>) {
    return DLDataType{kDLFloat, static_cast<uint8_t>(sizeof(T) * 8), 1};
  } else if constexpr (std::is_signed_v<T>) {
    return DLDataType{kDLInt, static_cast<uint8_t>(sizeof(T) * 8), 1};
  } else {
    return DLDataType{kDLUInt, static_cast<uint8_t>(sizeof(T) * 8), 1};
  }
}

inline constexpr bool same_dtype(DLDataType a, DLDataType b) noexcept {
  return a.code == b.code && a.bits == b.bits && a.lanes == b.lanes;
}

/* A dtype's name: "float32", "bfloat16", ... */
inline std::string dtype_name(DLDataType dtype) {
  char buffer[64];
  return mp_dtype_string(dtype, buffer, sizeof buffer);
}

inline constexpr DLDevice cpu(int32_t id = 0) noexcept { return DLDevice{kDLCPU, id}; }

/* "cpu", "opencl:0", "cuda:1", "vulkan", ... as a DLDevice (the runtime's device names). */
inline DLDevice parse_device(std::string_view name) {
  std::string type(name.substr(0, name.find(':')));
  int32_t id = 0;
  if (type.size() < name.size()) {
    std::string digits(name.substr(type.size() + 1));
    if (digits.empty() || digits.size() > 9 ||
        digits.find_first_not_of("0123456789") != std::string::npos)
      detail::argument_error("unknown device '" + std::string(name) +
                             "': use 'cpu', 'opencl:N', 'cuda:N', ...");
    id = static_cast<int32_t>(std::stol(digits));
  }
  int32_t device_type = 0;
  check(mp_device_type_from_name(type.c_str(), &device_type));
  return DLDevice{static_cast<DLDeviceType>(device_type), id};
}

/* How many devices of |device_type| this machine has (0 where its driver is missing). */
inline int32_t device_count(int32_t device_type) {
  int32_t count = 0;
  mp_status_t status = mp_device_count(device_type, &count);
  if (status == MP_ERR_UNAVAILABLE) return 0;
  check(status);
  return count;
}

inline std::string device_name(DLDevice device) {
  char buffer[512];
  check(mp_device_name(device, buffer, sizeof buffer));
  return buffer;
}

inline void synchronize(DLDevice device) { check(mp_device_synchronize(device)); }

/* Bytes of OpenCL __local memory for a kernel's __local parameter. */
struct LocalMemory {
  uint64_t nbytes;
};

/* An opaque pointer passed as MP_TYPE_HANDLE (never a plain pointer, so that a float* cannot
 * turn into one by accident). */
struct Handle {
  void* pointer;
};

/* ---- arrays -------------------------------------------------------------------------------- */

/* An array owned by the runtime (mp_array_*): allocated on a device, or a DLPack producer's
 * tensor adopted without a copy. Reference counted: copies share the array. */
class Array {
 public:
  Array() noexcept = default;
  Array(const Array& other) noexcept : handle_(other.handle_) {
    if (handle_) mp_array_retain(handle_);
  }
  Array(Array&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Array& operator=(Array other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~Array() {
    if (handle_) mp_array_release(handle_);
  }

  /* Take over one reference to an array made by mp_array_empty or mp_array_from_dlpack*. */
  static Array adopt(DLTensor* array) noexcept {
    Array result;
    result.handle_ = array;
    return result;
  }
  /* A new reference to such an array. */
  static Array borrow(DLTensor* array) noexcept {
    if (array) mp_array_retain(array);
    return adopt(array);
  }

  /* An uninitialised compact array. */
  static Array empty(const std::vector<int64_t>& shape, DLDataType dtype,
                     DLDevice device = cpu()) {
    if (shape.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
      detail::argument_error("modpack::Array::empty: too many dimensions");
    DLTensor* out = nullptr;
    check(mp_array_empty(shape.data(), static_cast<int32_t>(shape.size()), dtype, device, &out));
    return adopt(out);
  }
  template <typename T>
  static Array empty(const std::vector<int64_t>& shape, DLDevice device = cpu()) {
    return empty(shape, modpack::dtype<T>(), device);
  }
  /* A compact array on |device| holding a copy of |values|, of shape |shape| (default: one
   * dimension of values.size()). */
  template <typename T>
  static Array from_vector(const std::vector<T>& values, std::vector<int64_t> shape = {},
                           DLDevice device = cpu()) {
    if (shape.empty()) shape.push_back(static_cast<int64_t>(values.size()));
    Array result = empty<T>(shape, device);
    result.copy_from_host(values.data(), values.size() * sizeof(T));
    return result;
  }

  /* Adopt a DLPack producer's tensor without a copy (mp_array_from_dlpack_versioned): on
   * success the array owns |managed| and runs its deleter when the last copy goes; on an
   * exception the caller still owns it. A tensor flagged read-only gives a read-only array. */
  static Array from_dlpack(DLManagedTensorVersioned* managed) {
    DLTensor* out = nullptr;
    check(mp_array_from_dlpack_versioned(managed, &out));
    return adopt(out);
  }
  static Array from_dlpack(DLManagedTensor* managed) {
    DLTensor* out = nullptr;
    check(mp_array_from_dlpack(managed, &out));
    return adopt(out);
  }

  DLTensor* get() const noexcept { return handle_; }
  /* Give up the reference without releasing it; the array becomes empty. */
  DLTensor* release() noexcept { return std::exchange(handle_, nullptr); }
  explicit operator bool() const noexcept { return handle_ != nullptr; }
  const DLTensor& tensor() const { return *require(); }

  int32_t ndim() const { return require()->ndim; }
  std::vector<int64_t> shape() const {
    const DLTensor* t = require();
    return std::vector<int64_t>(t->shape, t->shape + t->ndim);
  }
  /* Strides in elements; empty for a compact array. */
  std::vector<int64_t> strides() const {
    const DLTensor* t = require();
    return t->strides ? std::vector<int64_t>(t->strides, t->strides + t->ndim)
                      : std::vector<int64_t>();
  }
  bool is_compact() const { return require()->strides == nullptr; }
  DLDataType dtype() const { return require()->dtype; }
  DLDevice device() const { return require()->device; }
  /* product(shape) * element size. */
  uint64_t nbytes() const { return mp_array_nbytes(require()); }
  uint64_t size() const {
    uint64_t count = 1;
    for (int64_t extent : shape()) count *= static_cast<uint64_t>(extent);
    return count;
  }
  bool read_only() const { return (mp_array_flags(require()) & MP_ARRAY_READ_ONLY) != 0; }

  /* The first element of a CPU array as T* (T's size must be the element size). A non-const
   * T of a read-only array is refused: ask for const T. */
  template <typename T>
  T* host_data() const {
    const DLTensor* t = require();
    if (t->device.device_type != kDLCPU)
      detail::argument_error("modpack::Array::host_data: the array is on " +
                             device_label(t->device) + ", not the CPU: copy it to the host");
    if ((static_cast<uint64_t>(t->dtype.bits) * t->dtype.lanes + 7) / 8 != sizeof(T))
      detail::argument_error("modpack::Array::host_data: elements of " +
                             dtype_name(t->dtype) + " are not " + std::to_string(sizeof(T)) +
                             "-byte values");
    if (!std::is_const_v<T> && read_only())
      detail::argument_error(
          "modpack::Array::host_data: the array is read-only: ask for const T");
    return reinterpret_cast<T*>(static_cast<char*>(t->data) + t->byte_offset);
  }

  /* Copies between compact arrays of the same shape and dtype, on any devices. */
  void copy_from(const DLTensor& source) const {
    require_writable("copy_from");
    check(mp_array_copy(&source, require()));
  }
  void copy_from(const Array& source) const { copy_from(source.tensor()); }
  void copy_to(DLTensor& target) const { check(mp_array_copy(require(), &target)); }
  void copy_to(const Array& target) const {
    target.require_writable("copy_to's target");
    copy_to(*target.require());
  }
  /* Copies from and to host memory of exactly nbytes() bytes (compact arrays). */
  void copy_from_host(const void* data, uint64_t nbytes) const {
    require_writable("copy_from_host");
    const DLTensor* t = require_host_copy(nbytes);
    check(mp_device_copy(data, 0, cpu(), t->data, t->byte_offset, t->device, nbytes));
  }
  void copy_to_host(void* data, uint64_t nbytes) const {
    const DLTensor* t = require_host_copy(nbytes);
    check(mp_device_copy(t->data, t->byte_offset, t->device, data, 0, cpu(), nbytes));
  }
  template <typename T>
  std::vector<T> to_vector() const {
    if (!same_dtype(modpack::dtype<T>(), dtype()))
      detail::argument_error("modpack::Array::to_vector: the array is " + dtype_name(dtype()) +
                             ", not " + dtype_name(modpack::dtype<T>()));
    std::vector<T> out(static_cast<size_t>(size()));
    copy_to_host(out.data(), out.size() * sizeof(T));
    return out;
  }

  /* Export for a DLPack consumer, without a copy (the consumer calls the deleter): versioned
   * (DLPack 1.x, read-only flag set for a read-only array, plus |flags|), or the legacy form,
   * which refuses a read-only array. */
  DLManagedTensorVersioned* to_dlpack(uint64_t flags = 0) const {
    DLManagedTensorVersioned* out = nullptr;
    check(mp_array_to_dlpack_versioned(require(), flags, &out));
    return out;
  }
  DLManagedTensor* to_dlpack_legacy() const {
    DLManagedTensor* out = nullptr;
    check(mp_array_to_dlpack(require(), &out));
    return out;
  }

 private:
  static std::string device_label(DLDevice device) {
    const char* type = mp_device_type_name(static_cast<int32_t>(device.device_type));
    return std::string(type ? type : "device type " + std::to_string(device.device_type)) +
           ":" + std::to_string(device.device_id);
  }
  DLTensor* require() const {
    if (!handle_) detail::argument_error("an empty modpack::Array was used");
    return handle_;
  }
  void require_writable(const char* what) const {
    if (read_only())
      detail::argument_error(std::string("modpack::Array::") + what +
                             ": the array is read-only");
  }
  const DLTensor* require_host_copy(uint64_t nbytes) const {
    const DLTensor* t = require();
    if (t->strides)
      detail::argument_error("modpack::Array: a strided array is not copied to or from host "
                             "memory as bytes");
    if (nbytes != mp_array_nbytes(t))
      detail::argument_error("modpack::Array: the host buffer has " + std::to_string(nbytes) +
                             " bytes, the array " + std::to_string(mp_array_nbytes(t)));
    return t;
  }

  DLTensor* handle_ = nullptr;
};

/* ---- functions and values ------------------------------------------------------------------ */

class Value;
class Arg;

/* A function of a loaded module (host code, a device kernel, a function of a kind written in
 * C), called with C++ values. */
class Function {
 public:
  Function() noexcept = default;
  Function(const Function& other) noexcept : handle_(other.handle_) {
    if (handle_) mp_function_retain(handle_);
  }
  Function(Function&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Function& operator=(Function other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~Function() {
    if (handle_) mp_function_release(handle_);
  }
  static Function adopt(mp_function_t* function) noexcept {
    Function result;
    result.handle_ = function;
    return result;
  }
  static Function borrow(mp_function_t* function) noexcept {
    if (function) mp_function_retain(function);
    return adopt(function);
  }
  mp_function_t* get() const noexcept { return handle_; }
  mp_function_t* release() noexcept { return std::exchange(handle_, nullptr); }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /* Call with any of: integers, bool, floating point, const char* / std::string /
   * std::string_view, nullptr (None), DLTensor* / DLTensor& (const: read-only), Array,
   * Function, LocalMemory, Handle, or an mp_value_t as it is. */
  template <typename... Args>
  Value operator()(Args&&... args) const;
  /* The same, with the result as R: an integer type (range-checked), bool, float, double,
   * std::string, Function, void* (a handle), Value, or void (any result). */
  template <typename R, typename... Args>
  R call(Args&&... args) const;
  /* Call with |args| as given. */
  Value call_packed(const mp_value_t* args, size_t num_args) const;
  Value call_list(std::initializer_list<Arg> args) const;

 private:
  mp_function_t* handle_ = nullptr;
};

/* One argument of a call, converted from a C++ value; it borrows what it points to. */
class Arg {
 public:
  Arg(std::nullptr_t) noexcept { set(MP_TYPE_NONE); }
  template <typename T, std::enable_if_t<std::is_integral_v<T>, int> = 0>
  Arg(T v) {
    if constexpr (std::is_unsigned_v<T> && sizeof(T) >= sizeof(int64_t)) {
      if (v > static_cast<T>(std::numeric_limits<int64_t>::max()))
        detail::argument_error("the integer " + std::to_string(v) +
                               " does not fit in 64 bits (int64)");
    }
    set(MP_TYPE_INT);
    value_.v_int64 = static_cast<int64_t>(v);
  }
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Arg(T v) noexcept {
    set(MP_TYPE_FLOAT);
    value_.v_float64 = static_cast<double>(v);
  }
  Arg(const char* s) noexcept {
    set(s ? MP_TYPE_STR : MP_TYPE_NONE);
    value_.v_str = s;
  }
  Arg(const std::string& s) { set_string(s.c_str(), s.size()); }
  Arg(std::string_view s) : owned_(s) { set_string(owned_.c_str(), owned_.size()); }
  Arg(DLTensor* t) noexcept { set_tensor(t, false); }
  Arg(DLTensor& t) noexcept { set_tensor(&t, false); }
  Arg(const DLTensor* t) noexcept { set_tensor(const_cast<DLTensor*>(t), true); }
  Arg(const DLTensor& t) noexcept { set_tensor(const_cast<DLTensor*>(&t), true); }
  Arg(const Array& a) { set_tensor(a.get(), a && a.read_only()); }
  Arg(const Function& f) noexcept {
    set(f ? MP_TYPE_FUNCTION : MP_TYPE_NONE);
    value_.v_handle = f.get();
  }
  Arg(LocalMemory m) noexcept {
    set(MP_TYPE_LOCAL_MEMORY);
    value_.v_int64 = static_cast<int64_t>(m.nbytes);
  }
  Arg(Handle h) noexcept {
    set(MP_TYPE_HANDLE);
    value_.v_handle = h.pointer;
  }
  Arg(const mp_value_t& v) noexcept : value_(v) {}
  /* It may point into itself (a string_view's copy): made in place, never copied. */
  Arg(const Arg&) = delete;
  Arg& operator=(const Arg&) = delete;

  const mp_value_t& value() const noexcept { return value_; }

 private:
  void set(int32_t type_code) noexcept {
    value_.type_code = type_code;
    value_.flags = 0;
    value_.v_int64 = 0;
  }
  void set_string(const char* s, size_t size) {
    if (std::strlen(s) != size) detail::argument_error("a string argument contains a NUL");
    set(MP_TYPE_STR);
    value_.v_str = s;
  }
  void set_tensor(DLTensor* t, bool read_only) noexcept {
    set(t ? MP_TYPE_DLTENSOR : MP_TYPE_NONE);
    value_.v_tensor = t;
    if (t && read_only) value_.flags = MP_VALUE_READ_ONLY;
  }

  std::string owned_;
  mp_value_t value_;
};

/* What a function returned: None, an int, a float, a string (copied), a function (a
 * reference of its own), a handle. */
class Value {
 public:
  Value() noexcept {
    value_.type_code = MP_TYPE_NONE;
    value_.flags = 0;
    value_.v_int64 = 0;
  }
  /* A returned value as the caller owns it (strings copied, functions retained). */
  static Value from_result(const mp_value_t& result) {
    Value value;
    value.value_ = result;
    if (result.type_code == MP_TYPE_STR) {
      if (result.v_str) {
        value.string_ = result.v_str;
        value.value_.v_str = nullptr;  // the function's storage: not kept
      } else {
        value.value_.type_code = MP_TYPE_NONE;
      }
    } else if (result.type_code == MP_TYPE_FUNCTION) {
      value.function_ = Function::borrow(static_cast<mp_function_t*>(result.v_handle));
    }
    return value;
  }

  int32_t type_code() const noexcept { return value_.type_code; }
  /* "None", "int", "float", "str", "function", "handle", ... */
  const char* type_name() const noexcept { return mp_type_code_name(value_.type_code); }
  bool is_none() const noexcept { return value_.type_code == MP_TYPE_NONE; }
  bool is_int() const noexcept { return value_.type_code == MP_TYPE_INT; }
  bool is_float() const noexcept { return value_.type_code == MP_TYPE_FLOAT; }
  bool is_string() const noexcept { return value_.type_code == MP_TYPE_STR; }
  bool is_function() const noexcept { return value_.type_code == MP_TYPE_FUNCTION; }

  int64_t as_int() const {
    expect(MP_TYPE_INT, "an int");
    return value_.v_int64;
  }
  double as_float() const {
    expect(MP_TYPE_FLOAT, "a float");
    return value_.v_float64;
  }
  const std::string& as_string() const {
    expect(MP_TYPE_STR, "a str");
    return string_;
  }
  const Function& as_function() const {
    expect(MP_TYPE_FUNCTION, "a function");
    return function_;
  }
  void* as_handle() const {
    expect(MP_TYPE_HANDLE, "a handle");
    return value_.v_handle;
  }
  template <typename T>
  T as() const {
    if constexpr (std::is_same_v<T, Value>) {
      return *this;
    } else if constexpr (std::is_same_v<T, bool>) {
      return as_int() != 0;
    } else if constexpr (std::is_integral_v<T>) {
      const int64_t v = as_int();
      bool fits;
      if constexpr (std::is_signed_v<T>) {
        fits = sizeof(T) >= sizeof(int64_t) ||
               (v >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                v <= static_cast<int64_t>(std::numeric_limits<T>::max()));
      } else {
        fits = v >= 0 && (sizeof(T) >= sizeof(int64_t) ||
                          static_cast<uint64_t>(v) <=
                              static_cast<uint64_t>(std::numeric_limits<T>::max()));
      }
      if (!fits)
        detail::argument_error("the function returned " + std::to_string(v) +
                               ", which does not fit the requested integer type");
      return static_cast<T>(v);
    } else if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(as_float());
    } else if constexpr (std::is_same_v<T, std::string>) {
      return as_string();
    } else if constexpr (std::is_same_v<T, Function>) {
      return as_function();
    } else if constexpr (std::is_same_v<T, void*>) {
      return as_handle();
    } else {
      static_assert(detail::always_false<T>,
                    "modpack::Value::as<T>: T is an integer type, bool, float, double, "
                    "std::string, modpack::Function, void* or modpack::Value");
    }
  }
  /* The tagged value as returned (a string's pointer is not kept: use as_string). */
  const mp_value_t& raw() const noexcept { return value_; }

 private:
  void expect(int32_t type_code, const char* what) const {
    if (value_.type_code != type_code)
      detail::argument_error(std::string("the function returned ") +
                             mp_type_code_name(value_.type_code) + ", not " + what);
  }

  mp_value_t value_;
  std::string string_;
  Function function_;
};

inline Value Function::call_packed(const mp_value_t* args, size_t num_args) const {
  if (!handle_) detail::argument_error("an empty modpack::Function was called");
  if (num_args > static_cast<size_t>(std::numeric_limits<int32_t>::max() / 2))
    detail::argument_error("too many arguments: " + std::to_string(num_args));
  mp_value_t result;
  result.type_code = MP_TYPE_NONE;
  result.flags = 0;
  result.v_int64 = 0;
  check(mp_function_call(handle_, args, static_cast<int32_t>(num_args), &result));
  return Value::from_result(result);
}

inline Value Function::call_list(std::initializer_list<Arg> args) const {
  constexpr size_t kOnStack = 16;
  mp_value_t on_stack[kOnStack];
  std::vector<mp_value_t> on_heap;
  mp_value_t* values = on_stack;
  if (args.size() > kOnStack) {
    on_heap.resize(args.size());
    values = on_heap.data();
  }
  size_t i = 0;
  for (const Arg& arg : args) values[i++] = arg.value();
  return call_packed(values, args.size());
}

template <typename... Args>
Value Function::operator()(Args&&... args) const {
  return call_list({Arg(std::forward<Args>(args))...});
}

template <typename R, typename... Args>
R Function::call(Args&&... args) const {
  if constexpr (std::is_void_v<R>) {
    (*this)(std::forward<Args>(args)...);
  } else {
    return (*this)(std::forward<Args>(args)...).template as<R>();
  }
}

/* ---- loading ------------------------------------------------------------------------------- */

/* A trusted Ed25519 public key, for signed loads. */
class TrustedKey {
 public:
  explicit TrustedKey(const mp_trusted_key_t& key) noexcept : key_(key) {}
  /* From PEM text ("-----BEGIN PUBLIC KEY-----", as `openssl pkey -pubout` writes it). */
  static TrustedKey from_pem(std::string_view pem) {
    mp_trusted_key_t key;
    check(mp_trusted_key_from_pem(pem.data(), pem.size(), &key));
    return TrustedKey(key);
  }
  static TrustedKey from_pem_file(const std::string& path) {
    std::ifstream file(path, std::ios::binary);
    if (!file) throw NotFoundError(MP_ERR_NOT_FOUND, "cannot read the key file " + path);
    std::string pem((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    return from_pem(pem);
  }
  const mp_trusted_key_t& raw() const noexcept { return key_; }

 private:
  mp_trusted_key_t key_;
};

/* How to load (mp_load_options_t): flags, trusted keys, where weight files are. */
class LoadOptions {
 public:
  /* Skip the payloads' checksums (MP_LOAD_SKIP_PAYLOAD_CHECKSUMS). */
  LoadOptions& skip_payload_checksums(bool on = true) { return flag(MP_LOAD_SKIP_PAYLOAD_CHECKSUMS, on); }
  /* Load a library without a seal (MP_LOAD_ALLOW_UNSEALED). */
  LoadOptions& allow_unsealed(bool on = true) { return flag(MP_LOAD_ALLOW_UNSEALED, on); }
  /* Signed loads: copy the weights too (MP_LOAD_PRIVATE_COPY). */
  LoadOptions& private_copy(bool on = true) { return flag(MP_LOAD_PRIVATE_COPY, on); }
  /* Signed loads: check each weight-file array when first used (MP_LOAD_VERIFY_ON_FIRST_USE). */
  LoadOptions& verify_on_first_use(bool on = true) { return flag(MP_LOAD_VERIFY_ON_FIRST_USE, on); }
  /* Check weight-file digests even unsigned (MP_LOAD_CHECK_DIGESTS). */
  LoadOptions& check_digests(bool on = true) { return flag(MP_LOAD_CHECK_DIGESTS, on); }
  /* Neither read nor write the kernel cache for this tree (MP_LOAD_NO_KERNEL_CACHE). */
  LoadOptions& kernel_cache(bool on = true) { return flag(MP_LOAD_NO_KERNEL_CACHE, !on); }
  LoadOptions& flags(uint32_t flags) {
    flags_ = flags;
    return *this;
  }
  uint32_t flags() const noexcept { return flags_; }

  /* Trust |key|: the load is then signed (mp_module_load_signed's checks). */
  LoadOptions& trust(const TrustedKey& key) {
    keys_.push_back(key.raw());
    return *this;
  }
  LoadOptions& trust_pem_file(const std::string& path) {
    return trust(TrustedKey::from_pem_file(path));
  }
  /* The library's only weight file is at |path|. */
  LoadOptions& weights(const std::string& path) { return weights_of("", path); }
  /* The weight file the library records as |file_name| is at |path|. */
  LoadOptions& weights(const std::string& file_name, const std::string& path) {
    if (file_name.empty()) detail::argument_error("LoadOptions::weights: an empty file name");
    return weights_of(file_name, path);
  }
  /* Weight files are in |folder| (instead of beside the library). */
  LoadOptions& weights_folder(const std::string& folder) {
    folder_ = folder;
    has_folder_ = true;
    return *this;
  }

  /* The C options (get()), pointing into this object and into itself: valid while both live
   * and this one is unchanged. */
  class C {
   public:
    const mp_load_options_t* get() const noexcept { return &options_; }

   private:
    friend class LoadOptions;
    mp_load_options_t options_;
    std::vector<mp_weights_location_t> locations_;
  };
  C c_options() const {
    C c;
    for (const auto& [name, path] : weights_)
      c.locations_.push_back({name.empty() ? nullptr : name.c_str(), path.c_str()});
    std::memset(&c.options_, 0, sizeof c.options_);
    c.options_.struct_size = sizeof c.options_;
    c.options_.flags = flags_;
    c.options_.trusted_keys = keys_.empty() ? nullptr : keys_.data();
    c.options_.num_trusted_keys = keys_.size();
    c.options_.weights = c.locations_.empty() ? nullptr : c.locations_.data();
    c.options_.num_weights = c.locations_.size();
    c.options_.weights_folder = has_folder_ ? folder_.c_str() : nullptr;
    return c;
  }

 private:
  LoadOptions& flag(uint32_t bit, bool on) {
    flags_ = on ? (flags_ | bit) : (flags_ & ~bit);
    return *this;
  }
  LoadOptions& weights_of(const std::string& file_name, const std::string& path) {
    weights_.emplace_back(file_name, path);
    return *this;
  }

  uint32_t flags_ = 0;
  std::vector<mp_trusted_key_t> keys_;
  std::vector<std::pair<std::string, std::string>> weights_;
  std::string folder_;
  bool has_folder_ = false;
};

/* ---- modules ------------------------------------------------------------------------------- */

class WeightFile;

/* A named array of a module (a const module's weights, a weight file's arrays): borrowed, valid
 * while the module lives (a weights module's: until the next swap_weights; hold a WeightFile
 * to keep one version). */
struct NamedArray {
  std::string name;
  const DLTensor* array;
};

/* A module of a loaded library's tree (or of a system library, or a weight file). */
class Module {
 public:
  Module() noexcept = default;
  Module(const Module& other) noexcept : handle_(other.handle_) {
    if (handle_) mp_module_retain(handle_);
  }
  Module(Module&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Module& operator=(Module other) noexcept {
    std::swap(handle_, other.handle_);
    return *this;
  }
  ~Module() {
    if (handle_) mp_module_release(handle_);
  }
  static Module adopt(mp_module_t* module) noexcept {
    Module result;
    result.handle_ = module;
    return result;
  }
  static Module borrow(mp_module_t* module) noexcept {
    if (module) mp_module_retain(module);
    return adopt(module);
  }
  mp_module_t* get() const noexcept { return handle_; }
  mp_module_t* release() noexcept { return std::exchange(handle_, nullptr); }
  explicit operator bool() const noexcept { return handle_ != nullptr; }

  /* Load the library at |path| (mp_module_load): its seal checked before anything runs, its
   * weight files found beside it or where |options| says; with trusted keys, a signed load. */
  static Module load(const std::string& path, const LoadOptions& options = LoadOptions()) {
    LoadOptions::C c = options.c_options();
    mp_module_t* out = nullptr;
    check(mp_module_load(path.c_str(), c.get(), &out));
    return adopt(out);
  }
  /* Load a library from bytes (copied once: |data| may be freed on return). */
  static Module load_from_memory(const void* data, size_t size,
                                 const LoadOptions& options = LoadOptions()) {
    LoadOptions::C c = options.c_options();
    mp_module_t* out = nullptr;
    check(mp_module_load_memory(data, size, c.get(), &out));
    return adopt(out);
  }
  static Module load_from_memory(std::string_view bytes,
                                 const LoadOptions& options = LoadOptions()) {
    return load_from_memory(bytes.data(), bytes.size(), options);
  }
  /* A system library linked into this program: load_system_lib(modpack_system_lib_NAME()). */
  static Module load_system_lib(const mp_system_lib_t* library) {
    mp_module_t* out = nullptr;
    check(mp_module_load_system_lib(library, &out));
    return adopt(out);
  }
  /* A weight file on its own, as a module whose arrays are the file's (mp_weights_load). */
  static Module load_weights(const std::string& path,
                             const LoadOptions& options = LoadOptions()) {
    LoadOptions::C c = options.c_options();
    mp_module_t* out = nullptr;
    check(mp_weights_load(path.c_str(), c.get(), &out));
    return adopt(out);
  }

  std::string type_key() const { return mp_module_type_key(require()); }
  std::optional<std::string> name() const {
    const char* name = mp_module_name(require());
    return name ? std::optional<std::string>(name) : std::nullopt;
  }
  /* The file it was loaded from (none for system libraries and payloads). */
  std::optional<std::string> library_path() const {
    mp_library_t* library = mp_module_library(require());
    const char* path = library ? mp_library_path(library) : nullptr;
    return path ? std::optional<std::string>(path) : std::nullopt;
  }
  /* The metadata its library was exported with (`export_library(..., metadata=...)`): JSON
   * text of one object, a view valid while a module of that library lives; none when it has
   * none (mp_module_metadata). */
  std::optional<std::string_view> metadata() const {
    mp_const_byte_span_t span{};
    mp_module_metadata(require(), &span);
    if (span.size == 0) return std::nullopt;
    return std::string_view(reinterpret_cast<const char*>(span.data),
                            static_cast<size_t>(span.size));
  }

  size_t import_count() const { return static_cast<size_t>(mp_module_import_count(require())); }
  Module import_at(size_t index) const {
    mp_module_t* child = mp_module_import_at(require(), index);
    if (!child)
      detail::argument_error("import " + std::to_string(index) + " of a module with " +
                             std::to_string(import_count()));
    return borrow(child);
  }
  std::vector<Module> imports() const {
    std::vector<Module> out;
    for (size_t i = 0, n = import_count(); i < n; ++i) out.push_back(import_at(i));
    return out;
  }
  /* Add |child| to this module's imports (refused if it would close a cycle). */
  void import_module(const Module& child) const {
    check(mp_module_import(require(), child.require()));
  }

  /* The function |name| ("module/function": in the module of that name), from this module or,
   * with |query_imports|, its imports; NotFoundError naming it when absent. */
  Function get_function(const std::string& name, bool query_imports = false) const {
    mp_function_t* out = nullptr;
    check(mp_module_get_function(require(), name.c_str(), query_imports ? 1 : 0, &out));
    return Function::adopt(out);
  }
  Function operator[](const std::string& name) const { return get_function(name); }
  /* The same, empty instead of NotFoundError when absent. */
  std::optional<Function> find_function(const std::string& name,
                                        bool query_imports = false) const {
    mp_function_t* out = nullptr;
    mp_status_t status =
        mp_module_get_function(require(), name.c_str(), query_imports ? 1 : 0, &out);
    if (status == MP_ERR_NOT_FOUND) {
      mp_error_clear();
      return std::nullopt;
    }
    check(status);
    return Function::adopt(out);
  }
  /* The functions the module lists (a device module's kernels). */
  std::vector<std::string> function_names() const {
    std::vector<std::string> out;
    mp_module_t* m = require();
    for (uint64_t i = 0, n = mp_module_function_count(m); i < n; ++i) {
      const char* name = mp_module_function_name(m, i);
      if (name) out.emplace_back(name);
    }
    return out;
  }
  /* Kind-specific details, one JSON object. */
  std::string describe() const {
    std::string buffer(256, '\0');
    for (;;) {
      uint64_t needed = 0;
      check(mp_module_describe(require(), buffer.data(), buffer.size(), &needed));
      if (needed < buffer.size()) {
        buffer.resize(static_cast<size_t>(needed));
        return buffer;
      }
      buffer.assign(static_cast<size_t>(needed) + 1, '\0');
    }
  }

  /* Named arrays (const and weights modules). */
  size_t array_count() const { return static_cast<size_t>(mp_module_array_count(require())); }
  NamedArray array_at(size_t index) const {
    const char* name = nullptr;
    const DLTensor* array = nullptr;
    check(mp_module_array_at(require(), index, &name, &array));
    return NamedArray{name ? name : "", array};
  }
  std::vector<NamedArray> arrays() const {
    std::vector<NamedArray> out;
    for (size_t i = 0, n = array_count(); i < n; ++i) out.push_back(array_at(i));
    return out;
  }
  /* The array |name| of this module or (|query_imports|) its imports: borrowed, read-only. */
  const DLTensor* get_array(const std::string& name, bool query_imports = false) const {
    const DLTensor* out = nullptr;
    check(mp_module_get_array(require(), name.c_str(), query_imports ? 1 : 0, &out));
    return out;
  }

  /* Replace the weight file this module's tree reads by the one at |path| (its only weight
   * file, or the one the library records as |file_name|): checked completely first, then
   * switched atomically for callers (mp_module_swap_weights). */
  void swap_weights(const std::string& path) const {
    check(mp_module_swap_weights(require(), nullptr, path.c_str()));
  }
  void swap_weights(const std::string& file_name, const std::string& path) const {
    check(mp_module_swap_weights(require(), file_name.c_str(), path.c_str()));
  }
  /* The weights a weights module reads now, held whatever is swapped later. */
  WeightFile current_weights() const;

 private:
  friend class WeightFile;
  mp_module_t* require() const {
    if (!handle_) detail::argument_error("an empty modpack::Module was used");
    return handle_;
  }

  mp_module_t* handle_ = nullptr;
};

/* One version of a weights module's weights (mp_weights_current): its arrays stay valid while
 * this (or a copy) lives, whatever is swapped meanwhile. */
class WeightFile {
 public:
  size_t size() const { return module_.array_count(); }
  NamedArray at(size_t index) const {
    const char* name = nullptr;
    const DLTensor* array = nullptr;
    check(mp_weights_array_in(module_.require(), file_.get(), index, &name, &array));
    return NamedArray{name ? name : "", array};
  }
  /* The array |name|; NotFoundError when this version has none. */
  const DLTensor* get(const std::string& name) const {
    for (size_t i = 0, n = size(); i < n; ++i) {
      NamedArray entry = at(i);
      if (entry.name == name) return entry.array;
    }
    throw NotFoundError(MP_ERR_NOT_FOUND, "no array '" + name + "' in this weight file");
  }
  mp_weight_file_t* get() const noexcept { return file_.get(); }

 private:
  friend class Module;
  WeightFile(Module module, mp_weight_file_t* file)
      : module_(std::move(module)), file_(file, &mp_weight_file_release) {}

  Module module_;
  std::shared_ptr<mp_weight_file_t> file_;
};

inline WeightFile Module::current_weights() const {
  mp_weight_file_t* file = nullptr;
  check(mp_weights_current(require(), &file));
  return WeightFile(*this, file);
}

}  // namespace modpack

#endif /* MODPACK_MODPACK_HPP_ */
