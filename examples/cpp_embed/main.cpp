// cpp_embed: load a deployable library made by modpack from C++ — no Python involved.
//
//   ./cpp_embed deploy.so
//
// The C++ twin of examples/c_embed (the same library, made by ../c_embed/make_deploy.py):
// prints the module tree, calls `affine` (out = x * weights + bias) on eight floats held in
// modpack::Arrays, reads the const arrays "weights" and "bias" in place and checks the result;
// last, a call with a too short output array, which the function's signature refuses: the
// runtime's error arrives as a modpack::ArgumentError.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "modpack/modpack.hpp"

namespace {

constexpr int64_t N = 8;

void print_tree(const modpack::Module& module, int depth) {
  std::printf("%*s- %s", 2 * depth, "", module.type_key().c_str());
  const char* separator = " ";
  for (const modpack::NamedArray& entry : module.arrays()) {
    std::printf("%s%s(", separator, entry.name.c_str());
    for (int32_t d = 0; d < entry.array->ndim; ++d)
      std::printf("%s%lld", d ? ", " : "", static_cast<long long>(entry.array->shape[d]));
    std::printf(")");
    separator = ", ";
  }
  std::printf("\n");
  for (const modpack::Module& child : module.imports()) print_tree(child, depth + 1);
}

// A compact float32 vector of the library's, as floats (it is read-only: const float*).
const float* floats(const DLTensor* t) {
  if (t->device.device_type != kDLCPU || t->ndim != 1 || t->shape[0] != N ||
      !modpack::same_dtype(t->dtype, modpack::dtype<float>()) || t->strides)
    throw std::runtime_error("expected a compact float32 vector of 8 on the CPU");
  return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + t->byte_offset);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DEPLOY.so\n", argv[0]);
    return 2;
  }
  try {
    mp_version_t version = modpack::runtime_version();
    std::printf("modpack runtime %d.%d.%d\n", version.major, version.minor, version.patch);

    modpack::Module root = modpack::Module::load(argv[1]);  // released when it goes
    std::printf("module tree of %s:\n", argv[1]);
    print_tree(root, 0);

    modpack::Function affine = root.get_function("affine", /*query_imports=*/true);
    std::vector<float> x(N);
    for (int64_t i = 0; i < N; ++i) x[static_cast<size_t>(i)] = static_cast<float>(i) / (N - 1);
    modpack::Array input = modpack::Array::from_vector(x);
    modpack::Array output = modpack::Array::empty<float>({N});
    affine(input, output);  // arrays, ints, floats, strings, DLTensor& ... as they are

    const float* w = floats(root.get_array("weights", true));  // in place, no copy
    const float* b = floats(root.get_array("bias", true));
    std::vector<float> out = output.to_vector<float>();
    std::printf("affine(x) =");
    for (float v : out) std::printf(" %.3f", static_cast<double>(v));
    std::printf("\n");
    for (size_t i = 0; i < out.size(); ++i) {
      if (std::fabs(out[i] - (x[i] * w[i] + b[i])) > 1e-6f) {
        std::fprintf(stderr, "cpp_embed: out[%zu] = %.9g is wrong\n", i,
                     static_cast<double>(out[i]));
        return 1;
      }
    }

    try {
      modpack::Array too_short = modpack::Array::empty<float>({N / 2});
      affine(input, too_short);
      std::fprintf(stderr, "cpp_embed: a call with a short output array was not refused\n");
      return 1;
    } catch (const modpack::ArgumentError& e) {
      std::printf("refused (status %d, modpack::ArgumentError): %s\n", e.status(), e.what());
    }
    std::printf("cpp_embed: OK\n");
    return 0;
  } catch (const modpack::Error& e) {  // every runtime failure: its status and message
    std::fprintf(stderr, "cpp_embed: modpack error %d: %s\n", e.status(), e.what());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpp_embed: %s\n", e.what());
  }
  return 1;
}
