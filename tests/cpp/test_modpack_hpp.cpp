// The C++ layer (modpack/modpack.hpp) against libraries tests/test_cpp.py exports:
//
//   test_modpack_hpp LIB.so WEIGHTS_LIB.so MODEL.mpw MODEL2.mpw KEY.pub.pem OTHER.pub.pem BAD.so
//
// LIB.so: host functions (see HOST in test_cpp.py) and a const module {"w": float32[4]};
// signed by KEY. WEIGHTS_LIB.so: reads "v" from the weight file MODEL.mpw, kept elsewhere;
// MODEL2.mpw has other values. BAD.so is no library. Prints "test_modpack_hpp: OK" when every
// check holds; else the failed checks, and exits 1.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "modpack/modpack.hpp"

namespace {

int failures = 0;

#define CHECK(condition)                                                        \
  do {                                                                          \
    if (!(condition)) {                                                         \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__,     \
                   #condition);                                                 \
      ++failures;                                                               \
    }                                                                           \
  } while (0)

// |body| throws exactly E, whose status is |status| and whose message contains |text|.
template <typename E, typename F>
void expect_throw(F&& body, mp_status_t status, const std::string& text, int line) {
  try {
    body();
  } catch (const E& e) {
    bool ok = e.status() == status && std::string(e.what()).find(text) != std::string::npos;
    if (!ok) {
      std::fprintf(stderr, "line %d: status %d, message '%s'; expected %d with '%s'\n", line,
                   static_cast<int>(e.status()), e.what(), static_cast<int>(status),
                   text.c_str());
      ++failures;
    }
    return;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "line %d: another exception: %s\n", line, e.what());
    ++failures;
    return;
  }
  std::fprintf(stderr, "line %d: nothing thrown\n", line);
  ++failures;
}
#define EXPECT_THROW(E, status, text, ...) expect_throw<E>([&] { __VA_ARGS__; }, status, text, __LINE__)

std::vector<int64_t> shape_of(int64_t n) { return {n}; }

DLTensor vector_tensor(float* data, int64_t* shape) {
  DLTensor t{};
  t.data = data;
  t.device = modpack::cpu();
  t.ndim = 1;
  t.dtype = modpack::dtype<float>();
  t.shape = shape;
  return t;
}

// The handles' semantics: copies share, moves empty the source, the last owner releases.
int deleted = 0;
void count_delete(DLManagedTensorVersioned* self) {
  ++deleted;
  delete[] static_cast<float*>(self->dl_tensor.data);
  delete[] self->dl_tensor.shape;
  delete self;
}
DLManagedTensorVersioned* make_managed(int64_t n, bool read_only) {
  auto* m = new DLManagedTensorVersioned{};
  m->version = {DLPACK_MAJOR_VERSION, 0};
  m->deleter = count_delete;
  m->flags = read_only ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  float* data = new float[static_cast<size_t>(n)];
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(i);
  m->dl_tensor.data = data;
  m->dl_tensor.device = modpack::cpu();
  m->dl_tensor.ndim = 1;
  m->dl_tensor.dtype = modpack::dtype<float>();
  m->dl_tensor.shape = new int64_t[1]{n};
  return m;
}

static_assert(std::is_nothrow_move_constructible_v<modpack::Module>);
static_assert(std::is_nothrow_move_constructible_v<modpack::Function>);
static_assert(std::is_nothrow_move_constructible_v<modpack::Array>);
static_assert(std::is_copy_constructible_v<modpack::WeightFile>);
static_assert(std::is_base_of_v<modpack::FormatError, modpack::SignatureError>);
static_assert(std::is_base_of_v<modpack::Error, modpack::NotFoundError>);
static_assert(std::is_base_of_v<std::runtime_error, modpack::Error>);

void test_calls(const modpack::Module& lib) {
  modpack::Function add = lib["add_int"];
  CHECK(add(2, 3).as_int() == 5);
  CHECK(add.call<int64_t>(int8_t{-2}, uint16_t{40000}) == 39998);
  CHECK(add.call<int>(true, 1) == 2);
  CHECK(add(2, 3).type_code() == MP_TYPE_INT);
  CHECK(std::string(add(2, 3).type_name()) == "int");
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "does not fit",
               add.call<int8_t>(100, 100));
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "does not fit in 64 bits",
               add(uint64_t{1} << 63, 1));
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "returned int, not a float",
               add(1, 2).as_float());
  // A wrong argument: the runtime's message, as an ArgumentError.
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "add_int", add(1.5, 2));

  modpack::Function scale = lib.get_function("scale");
  CHECK(scale.call<double>(1.5, 2.0f) == 3.0);
  CHECK(scale(0.25, 4.0).as<float>() == 1.0f);

  modpack::Function length = lib["str_len"];
  std::string text = "hello";
  CHECK(length.call<int64_t>("four") == 4);
  CHECK(length.call<int64_t>(text) == 5);
  CHECK(length.call<int64_t>(std::string_view("abcdefgh").substr(0, 3)) == 3);
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "NUL",
               length(std::string("a\0b", 3)));

  // Type names of what arrived, as a str result (copied out of the function's buffer).
  modpack::Function kinds = lib["kinds"];
  float x[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  DLTensor t = vector_tensor(x, shape);
  const DLTensor& ct = t;
  modpack::Array a = modpack::Array::empty<float>({4});
  std::string described = kinds.call<std::string>(nullptr, 1, 2.0, "s", t, &t, ct, &ct, a, add,
                                                  modpack::LocalMemory{16},
                                                  modpack::Handle{&t});
  CHECK(described == "None int float str array/w array/w array/r array/r array/w function "
                     "local memory handle");
  if (described != "None int float str array/w array/w array/r array/r array/w function "
                   "local memory handle")
    std::fprintf(stderr, "kinds: %s\n", described.c_str());
  CHECK(kinds.call<std::string>() == "");
  // More arguments than the stack holds.
  CHECK(kinds(1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18).as_string().size() ==
        18 * 4 - 1);

  // A function as a result: a reference of its own.
  modpack::Function echo = lib["echo"];
  modpack::Function same = echo.call<modpack::Function>(add);
  CHECK(same.get() == add.get());
  CHECK(same(20, 22).as_int() == 42);
  CHECK(echo(nullptr).is_none());
  CHECK(echo(modpack::Handle{&t}).as_handle() == &t);
  CHECK(echo("back").as_string() == "back");
  echo.call<void>(1);

  // Failures inside a function: the status's class, the function's message.
  modpack::Function fail = lib["fail"];
  EXPECT_THROW(modpack::CallError, MP_ERR_RUNTIME, "failing with 7", fail(7));
  EXPECT_THROW(modpack::NotFoundError, MP_ERR_NOT_FOUND, "failing with 3", fail(3));
  EXPECT_THROW(modpack::UnavailableError, MP_ERR_UNAVAILABLE, "failing with 9", fail(9));
  try {
    fail(12);
    CHECK(false);
  } catch (const modpack::FormatError& e) {  // WeightsMismatchError is a FormatError
    CHECK(e.status() == MP_ERR_MISMATCH);
    CHECK(dynamic_cast<const modpack::WeightsMismatchError*>(&e) != nullptr);
  }
  try {
    fail(1);
    CHECK(false);
  } catch (const std::runtime_error& e) {  // every Error is a std::runtime_error
    CHECK(std::string(e.what()).find("failing with 1") != std::string::npos);
  }

  EXPECT_THROW(modpack::NotFoundError, MP_ERR_NOT_FOUND, "no_such_function",
               lib["no_such_function"]);
  CHECK(!lib.find_function("no_such_function").has_value());
  CHECK(lib.find_function("add_int").has_value());
  CHECK(std::string(mp_error_message()).empty());  // find_function leaves no error behind
  modpack::Function empty;
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "empty modpack::Function",
               empty(1));
}

void test_arrays(const modpack::Module& lib) {
  modpack::Function vadd = lib["vadd"];
  float x[4] = {1, 2, 3, 4};
  float y[4] = {10, 20, 30, 40};
  float z[4] = {0, 0, 0, 0};
  int64_t shape[1] = {4};
  DLTensor tx = vector_tensor(x, shape), ty = vector_tensor(y, shape), tz = vector_tensor(z, shape);
  vadd(tx, &ty, tz);
  CHECK(z[0] == 11 && z[3] == 44);

  // const DLTensor& is read-only: refused where the function writes (its DLTensor* parameter).
  const DLTensor& read_only_out = tz;
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "read-only",
               vadd(tx, ty, read_only_out));
  // The signature's own check: a short output.
  int64_t short_shape[1] = {2};
  DLTensor short_out = vector_tensor(z, short_shape);
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "argument 2 (c)",
               vadd(tx, ty, short_out));

  // modpack::Array: runtime memory, copies in and out.
  modpack::Array a = modpack::Array::from_vector(std::vector<float>{1, 2, 3, 4});
  modpack::Array out = modpack::Array::empty({4}, modpack::dtype<float>());
  CHECK(a.ndim() == 1 && a.shape() == shape_of(4) && a.nbytes() == 16 && a.size() == 4);
  CHECK(a.is_compact() && a.strides().empty() && !a.read_only());
  CHECK(a.device().device_type == kDLCPU);
  CHECK(modpack::dtype_name(a.dtype()) == "float32");
  vadd(a, a, out);
  CHECK((out.to_vector<float>() == std::vector<float>{2, 4, 6, 8}));
  CHECK(out.host_data<const float>()[3] == 8);
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "not float64",
               out.to_vector<double>());
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "not 8-byte",
               out.host_data<double>());
  modpack::Array copy = modpack::Array::empty<float>({4});
  copy.copy_from(out);
  CHECK(copy.host_data<float>()[0] == 2);
  std::vector<float> host(4);
  copy.copy_to_host(host.data(), 16);
  CHECK(host[1] == 4);
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "host buffer has 8 bytes",
               copy.copy_to_host(host.data(), 8));

  // Handles: copies share the array, moves leave an empty source.
  {
    modpack::Array shared = a;
    CHECK(shared.get() == a.get());
    modpack::Array moved = std::move(shared);
    CHECK(!shared && moved.get() == a.get());
    modpack::Array& alias = moved;
    moved = alias;  // self-assignment keeps it
    CHECK(moved.get() == a.get());
    EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "empty modpack::Array",
                 shared.ndim());
  }

  // DLPack in: adopted without a copy, the producer's deleter run once, by the last owner.
  deleted = 0;
  DLManagedTensorVersioned* managed = make_managed(4, false);
  void* producer_data = managed->dl_tensor.data;
  {
    modpack::Array adopted = modpack::Array::from_dlpack(managed);
    CHECK(adopted.host_data<float>() == producer_data);
    modpack::Array second = adopted;
    { modpack::Array gone = std::move(adopted); }
    CHECK(deleted == 0);
    vadd(second, second, out);
    CHECK(out.to_vector<float>()[3] == 6);
  }
  CHECK(deleted == 1);

  // A read-only DLPack tensor stays read-only: refused where written, readable where not.
  deleted = 0;
  {
    modpack::Array weights = modpack::Array::from_dlpack(make_managed(4, true));
    CHECK(weights.read_only());
    CHECK(weights.host_data<const float>()[2] == 2);
    vadd(weights, weights, out);
    CHECK(out.to_vector<float>()[2] == 4);
    EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "read-only",
                 vadd(a, a, weights));
    EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "read-only",
                 weights.host_data<float>());
    EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "read-only",
                 weights.copy_from(a));
    // DLPack out: versioned says read-only; the legacy form cannot, so it refuses.
    DLManagedTensorVersioned* exported = weights.to_dlpack();
    CHECK(exported->version.major == DLPACK_MAJOR_VERSION);
    CHECK((exported->flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0);
    CHECK(exported->dl_tensor.data == weights.get()->data);
    exported->deleter(exported);
    EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "read-only",
                 weights.to_dlpack_legacy());
  }
  CHECK(deleted == 1);
  DLManagedTensor* legacy = a.to_dlpack_legacy();
  CHECK(legacy->dl_tensor.data == a.get()->data);
  legacy->deleter(legacy);
  DLManagedTensorVersioned* round = a.to_dlpack(DLPACK_FLAG_BITMASK_IS_COPIED);
  CHECK(round->flags == DLPACK_FLAG_BITMASK_IS_COPIED);
  modpack::Array back = modpack::Array::from_dlpack(round);  // modpack to modpack
  CHECK(back.get()->data == a.get()->data && !back.read_only());

  // A DLPack tensor of another major version is refused, and stays the caller's.
  DLManagedTensorVersioned* future = make_managed(2, false);
  future->version.major = 2;
  EXPECT_THROW(modpack::IncompatibleError, MP_ERR_INCOMPATIBLE, "DLPack 2.0",
               modpack::Array::from_dlpack(future));
  deleted = 0;
  future->deleter(future);
  CHECK(deleted == 1);

  // The const module's weights: borrowed, read-only, passed as const.
  const DLTensor* w = lib.get_array("w", true);
  CHECK(w->ndim == 1 && w->shape[0] == 4);
  vadd(w, w, out);
  CHECK(out.to_vector<float>()[1] == 1.0f);  // w = 0, 0.5, 1, 1.5
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "read-only", vadd(a, a, w));
  CHECK(lib["sum_w"].call<double>() == 3.0);
  EXPECT_THROW(modpack::NotFoundError, MP_ERR_NOT_FOUND, "nope", lib.get_array("nope", true));

  // Devices.
  CHECK(modpack::device_count(kDLCPU) >= 1);
  DLDevice parsed = modpack::parse_device("cpu");
  CHECK(parsed.device_type == kDLCPU && parsed.device_id == 0);
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "unknown device",
               modpack::parse_device("cpu:x"));
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "", modpack::parse_device("tpu"));
}

void test_modules(const std::string& path, const std::string& bad) {
  modpack::Module root = modpack::Module::load(path);
  CHECK(root.type_key() == "library");
  CHECK(root.library_path().has_value());
  CHECK(root.metadata().has_value() &&
        root.metadata()->find("\"revision\":\"4f2a9c1\"") != std::string_view::npos);
  CHECK(root.import_count() == 1);
  modpack::Module consts = root.import_at(0);
  CHECK(consts.type_key() == "const");
  CHECK(consts.metadata() == root.metadata());  /* one library: the same bytes */
  CHECK(consts.array_count() == 1 && consts.array_at(0).name == "w");
  CHECK(consts.arrays().size() == 1);
  CHECK(root.imports().size() == 1);
  CHECK(consts.describe().front() == '{');
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "import 5", root.import_at(5));

  // Loading the same file again gives the same tree; copies share the module.
  modpack::Module again = modpack::Module::load(path);
  CHECK(again.get() == root.get());
  modpack::Module copy = again;
  CHECK(copy.get() == root.get());
  modpack::Module moved = std::move(copy);
  CHECK(!copy && moved.get() == root.get());

  // A function outlives every module handle.
  modpack::Function add = root["add_int"];
  root = modpack::Module();
  again = modpack::Module();
  moved = modpack::Module();
  consts = modpack::Module();
  CHECK(add(40, 2).as_int() == 42);

  // From bytes: a tree of its own.
  std::ifstream file(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  modpack::Module from_memory = modpack::Module::load_from_memory(bytes);
  CHECK(from_memory["add_int"].call<int64_t>(1, 1) == 2);
  CHECK(modpack::Module::load_from_memory(bytes.data(), bytes.size(),
                                          modpack::LoadOptions().skip_payload_checksums())
            .get_function("add_int")
            .call<int64_t>(2, 2) == 4);
  CHECK(modpack::LoadOptions().kernel_cache(false).flags() == MP_LOAD_NO_KERNEL_CACHE);
  CHECK(modpack::LoadOptions().kernel_cache(false).kernel_cache().flags() == 0);

  EXPECT_THROW(modpack::FormatError, MP_ERR_FORMAT, bad, modpack::Module::load(bad));
  EXPECT_THROW(modpack::Error, MP_ERR_NOT_FOUND, "/no/such/dir/x.so",
               modpack::Module::load("/no/such/dir/x.so"));
  modpack::Module empty;
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "empty modpack::Module",
               empty.type_key());
}

void test_signed(const std::string& path, const std::string& key, const std::string& other) {
  modpack::Module lib = modpack::Module::load(path, modpack::LoadOptions().trust_pem_file(key));
  CHECK(lib["add_int"].call<int64_t>(3, 4) == 7);
  EXPECT_THROW(modpack::SignatureError, MP_ERR_UNTRUSTED, "",
               modpack::Module::load(path, modpack::LoadOptions().trust_pem_file(other)));
  try {  // caught as its base class, status kept
    modpack::Module::load(path, modpack::LoadOptions().trust_pem_file(other));
    CHECK(false);
  } catch (const modpack::FormatError& e) {
    CHECK(e.status() == MP_ERR_UNTRUSTED);
  }
  EXPECT_THROW(modpack::NotFoundError, MP_ERR_NOT_FOUND, "cannot read the key file",
               modpack::TrustedKey::from_pem_file("/no/such/key.pem"));
  EXPECT_THROW(modpack::ArgumentError, MP_ERR_INVALID_ARGUMENT, "",
               modpack::TrustedKey::from_pem("not a key"));
}

void test_weights(const std::string& path, const std::string& model, const std::string& model2) {
  // The weight file is not beside the library: without saying where, NotFoundError.
  EXPECT_THROW(modpack::NotFoundError, MP_ERR_NOT_FOUND, "", modpack::Module::load(path));
  EXPECT_THROW(modpack::NotFoundError, MP_ERR_NOT_FOUND, "/no/such",
               modpack::Module::load(path, modpack::LoadOptions().weights_folder("/no/such")));
  std::string folder = model.substr(0, model.rfind('/'));
  modpack::Module lib = modpack::Module::load(path, modpack::LoadOptions().weights_folder(folder));
  CHECK(modpack::Module::load(path, modpack::LoadOptions().weights(model)).get() == lib.get());
  modpack::Function sum = lib["sum_v"];
  CHECK(sum.call<double>() == 6.0);  // 1 + 2 + 3

  modpack::Module weights = lib.import_at(0);
  CHECK(weights.type_key() == "weights");
  modpack::WeightFile before = weights.current_weights();
  modpack::WeightFile held = before;  // copies share the version
  CHECK(held.size() == 1 && held.at(0).name == "v");

  lib.swap_weights(model2);
  CHECK(sum.call<double>() == 60.0);
  const float* old_values =
      static_cast<const float*>(held.get("v")->data);  // the old version, still mapped
  CHECK(old_values[2] == 3.0f);
  CHECK(static_cast<const float*>(weights.current_weights().get("v")->data)[2] == 30.0f);
  EXPECT_THROW(modpack::NotFoundError, MP_ERR_NOT_FOUND, "no array 'u'", held.get("u"));
  lib.swap_weights(model);  // and back, by name too
  CHECK(sum.call<double>() == 6.0);
  EXPECT_THROW(modpack::Error, MP_ERR_NOT_FOUND, "", lib.swap_weights("/no/such/file.mpw"));

  // A weight file alone, and a mismatch refused (its arrays are not the library's).
  modpack::Module alone = modpack::Module::load_weights(model2);
  CHECK(alone.array_count() == 1);
  CHECK(static_cast<const float*>(alone.get_array("v")->data)[0] == 10.0f);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 8) {
    std::fprintf(stderr,
                 "usage: %s LIB.so WEIGHTS_LIB.so MODEL.mpw MODEL2.mpw KEY.pub.pem "
                 "OTHER.pub.pem BAD.so\n",
                 argv[0]);
    return 2;
  }
  mp_version_t version = modpack::runtime_version();
  CHECK(version.major == MP_VERSION_MAJOR && version.minor == MP_VERSION_MINOR);
  try {
    modpack::Module lib = modpack::Module::load(argv[1]);
    test_calls(lib);
    test_arrays(lib);
    test_modules(argv[1], argv[7]);
    test_signed(argv[1], argv[5], argv[6]);
    test_weights(argv[2], argv[3], argv[4]);
  } catch (const modpack::Error& e) {
    std::fprintf(stderr, "unexpected modpack::Error (status %d): %s\n",
                 static_cast<int>(e.status()), e.what());
    return 1;
  }
  if (failures) {
    std::fprintf(stderr, "test_modpack_hpp: %d failed\n", failures);
    return 1;
  }
  std::printf("test_modpack_hpp: OK\n");
  return 0;
}
