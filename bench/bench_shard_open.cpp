// What opening a token shard costs (io::Shard, src/io/shard.hpp): the header alone, the tokens' CRC-32
// and the id check against vocab_size (the vectorised max over the mapped ids), each the best of --reps
// passes over a file already in the page cache (a first open from disk is bound by the disk instead).
// bench/README.md ("Opening a token shard") has the figures of the mini corpus and the Bigram-Backcopy data.
//
//   bench_shard_open [--reps N] SHARD...
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/timer.hpp"
#include "io/files.hpp"
#include "io/shard.hpp"

using namespace sinklab;

namespace {

// The best of `reps` timings of f, in seconds.
template <class F>
double best_of(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    Timer t;
    f();
    best = std::min(best, t.seconds());
  }
  return best;
}

void bench_shard(const std::string& path, int reps) {
  const io::Shard header_only(path, /*verify_tokens=*/false);
  const io::ShardHeader& h = header_only.header();
  const io::MappedFile file(path);
  const unsigned char* tokens = file.data() + io::kShardHeaderBytes;
  const uint64_t bytes = h.n_tokens * h.token_bytes;
  volatile uint32_t sink = 0;  // keeps the passes from being optimised away
  const double crc_s = best_of(reps, [&] {
    uLong crc = crc32(0L, Z_NULL, 0);
    for (uint64_t at = 0; at < bytes; at += 1u << 30)
      crc = crc32(crc, tokens + at, uInt(std::min<uint64_t>(bytes - at, 1u << 30)));
    sink = uint32_t(crc);
  });
  const double ids_s = best_of(reps, [&] { sink = io::max_token_id(tokens, h.n_tokens, h.token_bytes); });
  const double open_s = best_of(reps, [&] { io::Shard shard(path); });
  (void)sink;
  const double gb = double(bytes) / 1e9;
  std::printf("%s: %llu tokens x %u bytes (%.1f MB): crc32 %.2f ms (%.1f GB/s), id check %.2f ms (%.1f GB/s, "
              "%.2f ms/GB), whole open %.2f ms\n",
              path.c_str(), (unsigned long long)h.n_tokens, h.token_bytes, double(bytes) / 1e6, crc_s * 1e3,
              gb / crc_s, ids_s * 1e3, gb / ids_s, ids_s * 1e3 / gb, open_s * 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("bench_shard_open", [&] {
    int reps = 20;
    std::vector<std::string> paths;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
      else paths.push_back(argv[i]);
    }
    SL_CHECK(!paths.empty(), "usage: bench_shard_open [--reps N] SHARD...");
    for (const std::string& path : paths) bench_shard(path, reps);
    return 0;
  });
}
