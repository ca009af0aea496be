// libFuzzer target: a PyTorch checkpoint (io::TorchFile: the zip archive's directory and records, data.pkl
// through the restricted unpickler, storages, views with their strides and offsets), then every tensor it
// accepted read element by element through its strides — an accepted view must lie inside its mapped
// storage (ASan catches a read past it). Seeds: small torch.save files of the test fixtures.
#include <cstdint>

#include "fuzz_util.hpp"
#include "io/torch_file.hpp"

namespace {

// Sums the bytes of every element of a (possibly strided) CPU view.
uint64_t touch(const sinklab::Tensor& t) {
  const auto* base = static_cast<const unsigned char*>(t.data);
  const int64_t elem = sinklab::dtype_size(t.dtype);
  uint64_t sum = 0;
  const int64_t n = t.numel();
  for (int64_t flat = 0; flat < n; ++flat) {
    int64_t rest = flat, offset = 0;
    for (int d = t.ndim - 1; d >= 0; --d) {
      offset += (rest % t.shape[d]) * t.stride[d];
      rest /= t.shape[d];
    }
    for (int64_t b = 0; b < elem; ++b) sum += base[offset * elem + b];
  }
  return sum;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinklab;
  const std::string path = fuzz::write_file("pytorch_model.bin", data, size);
  fuzz::expect_clean([&] {
    io::TorchFile file(path);
    uint64_t checksum = 0;
    for (const std::string& name : file.names()) checksum += touch(file.view(name));
    if (checksum == 0x5eed) std::fprintf(stderr, "%s", "");
  });
  return 0;
}
