// libFuzzer target: a token shard (io::Shard: the 64-byte header and its CRC in version 2, the size it
// implies, the tokens' CRC and the id check against vocab_size), opened with and without the token checks;
// every token of a shard it accepted is then read, as the trainer does.
#include <cstdint>
#include <vector>

#include "fuzz_util.hpp"
#include "io/shard.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace sinklab;
  const std::string path = fuzz::write_file("tokens.bin", data, size);
  for (bool verify : {true, false})
    fuzz::expect_clean([&] {
      io::Shard shard(path, verify);
      std::vector<int32_t> ids(64);
      for (uint64_t begin = 0; begin < shard.size(); begin += ids.size()) {
        const uint64_t n = std::min<uint64_t>(ids.size(), shard.size() - begin);
        shard.read(begin, n, ids.data());
      }
    });
  return 0;
}
