// sinklab-shard: inspect a token shard (src/io/shard.hpp). Used by users to check data_prep output and
// by the data_prep tests to round-trip text -> shard -> C++ reader.
//   sinklab-shard info FILE                       header as key=value lines (header_crc32=none: version 1)
//   sinklab-shard dump FILE [--begin N] [--count M]   token ids, one per line
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.hpp"
#include "io/shard.hpp"

using namespace sinklab;

static uint64_t parse_count(const char* flag, const char* text) {
  char* end = nullptr;
  unsigned long long v = std::strtoull(text, &end, 10);
  SL_CHECK(end && *end == '\0' && text[0] != '-', "%s expects a non-negative integer, got '%s'", flag, text);
  return v;
}

int main(int argc, char** argv) {
  return run_main("sinklab-shard", [&]() {
    SL_CHECK(argc >= 3, "usage: sinklab-shard info|dump FILE [--begin N] [--count M]");
    std::string command = argv[1];
    io::Shard shard(argv[2]);
    const io::ShardHeader& h = shard.header();
    if (command == "info") {
      std::printf("vocab_size=%u\ntoken_bytes=%u\nn_tokens=%llu\nn_documents=%llu\neos_id=%u\n", h.vocab_size,
                  h.token_bytes, (unsigned long long)h.n_tokens, (unsigned long long)h.n_documents, h.eos_id);
      std::printf("bos_id=%lld\ncrc32=%08x\n", h.bos_id == io::kNoBos ? -1LL : (long long)h.bos_id, h.crc32);
      std::printf("version=%u\n", h.version);
      if (h.version >= 2) std::printf("header_crc32=%08x\n", h.header_crc32);
      else std::printf("header_crc32=none\n");
      return 0;
    }
    SL_CHECK(command == "dump", "unknown command '%s' (info or dump)", command.c_str());
    uint64_t begin = 0, count = h.n_tokens;
    for (int i = 3; i < argc; ++i) {
      std::string flag = argv[i];
      SL_CHECK(i + 1 < argc, "%s needs a value", flag.c_str());
      if (flag == "--begin") begin = parse_count("--begin", argv[++i]);
      else if (flag == "--count") count = parse_count("--count", argv[++i]);
      else SL_FAIL("unknown flag '%s'", flag.c_str());
    }
    SL_CHECK(begin <= h.n_tokens, "--begin %llu beyond %llu tokens", (unsigned long long)begin,
             (unsigned long long)h.n_tokens);
    if (count > h.n_tokens - begin) count = h.n_tokens - begin;
    for (uint64_t i = begin; i < begin + count; ++i) std::printf("%u\n", shard.token(i));
    return 0;
  });
}
