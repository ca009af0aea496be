// libFuzzer target: a safetensors file (io::SafetensorsFile: header length, JSON header, dtypes, shapes,
// data offsets), then every tensor it accepted read in full — an accepted header must describe bytes that
// really are inside the mapping (ASan catches a read past them).
#include <cstdint>

#include "fuzz_util.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinklab;
  const std::string path = fuzz::write_file("model.safetensors", data, size);
  fuzz::expect_clean([&] {
    io::SafetensorsFile file(path);
    uint64_t checksum = 0;
    for (const std::string& name : file.names()) {
      const io::TensorEntry& e = file.entry(name);
      const Tensor t = file.view(name);
      const auto* bytes = static_cast<const unsigned char*>(t.data);
      for (size_t i = 0; i < t.nbytes(); ++i) checksum += bytes[i];
      checksum += e.end - e.begin;
      file.release(name);
    }
    for (const auto& [key, value] : file.metadata()) checksum += key.size() + value.size();
    if (checksum == 0x5eed) std::fprintf(stderr, "%s", "");  // keeps the reads from being optimised away
  });
  return 0;
}
