// libFuzzer target: the sharded-weights index of a model directory (model.safetensors.index.json:
// {"weight_map": {tensor: shard file}}), read by hf::Checkpoint beside the three real shards of the
// llama_sharded_f16 fixture; then every tensor the index maps is looked up and read. Shard names that
// leave the directory, unknown shards and tensors a shard does not hold must be refused.
#include <cstdint>
#include <filesystem>

#include "fuzz_util.hpp"
#include "hf/checkpoint.hpp"

namespace fs = std::filesystem;

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // The model directory: the fixture's shards copied beside the index each input replaces.
  const fs::path fixture = fs::path(SINKLAB_FIXTURE_DIR) / "hf" / "llama_sharded_f16";
  for (const auto& e : fs::directory_iterator(fixture))
    if (e.path().filename().string().starts_with("model-"))
      fs::copy_file(e.path(), fs::path(sinklab::fuzz::scratch_dir()) / e.path().filename(),
                    fs::copy_options::overwrite_existing);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinklab;
  fuzz::write_file("model.safetensors.index.json", data, size);
  fuzz::expect_clean([&] {
    hf::Checkpoint ckpt(fuzz::scratch_dir());
    uint64_t checksum = 0;
    for (const std::string& name : ckpt.names()) {
      const Tensor t = ckpt.view(name);
      const auto* bytes = static_cast<const unsigned char*>(t.data);
      for (size_t i = 0; i < t.nbytes(); ++i) checksum += bytes[i];
    }
    if (checksum == 0x5eed) std::fprintf(stderr, "%s", "");
  });
  return 0;
}
