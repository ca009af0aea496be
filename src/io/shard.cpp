#include "io/shard.hpp"

#include <zlib.h>

#include <cstring>

#include "core/error.hpp"

namespace sinklab::io {
namespace {

template <class T>
T read_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86-64 and every supported target are little-endian
  return v;
}

uint32_t crc32_of(const unsigned char* bytes, uint64_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed in 1 GiB pieces.
  while (n > 0) {
    uInt piece = uInt(n > (1u << 30) ? (1u << 30) : n);
    crc = ::crc32(crc, bytes, piece);
    bytes += piece;
    n -= piece;
  }
  return uint32_t(crc);
}

}  // namespace

Shard::Shard(const std::string& path, bool verify_checksum) : path_(path), file_(path) {
  const unsigned char* p = file_.data();
  SL_CHECK(file_.size() >= kShardHeaderBytes, "%s: not a token shard (%zu bytes, shorter than the header)",
           path.c_str(), file_.size());
  SL_CHECK(std::memcmp(p, kShardMagic, 8) == 0, "%s: not a token shard (bad magic)", path.c_str());
  uint32_t version = read_le<uint32_t>(p + 8);
  SL_CHECK(version == kShardVersion, "%s: shard version %u, this build reads version %u", path.c_str(), version,
           kShardVersion);
  SL_CHECK(read_le<uint32_t>(p + 12) == kShardHeaderBytes, "%s: bad shard header size", path.c_str());
  header_.vocab_size = read_le<uint32_t>(p + 16);
  header_.token_bytes = read_le<uint32_t>(p + 20);
  header_.n_tokens = read_le<uint64_t>(p + 24);
  header_.n_documents = read_le<uint64_t>(p + 32);
  header_.eos_id = read_le<uint32_t>(p + 40);
  header_.bos_id = read_le<uint32_t>(p + 44);
  header_.crc32 = read_le<uint32_t>(p + 48);
  SL_CHECK(header_.token_bytes == 2 || header_.token_bytes == 4, "%s: token size %u bytes (expected 2 or 4)",
           path.c_str(), header_.token_bytes);
  SL_CHECK(header_.token_bytes == 4 || header_.vocab_size <= 65536, "%s: vocab %u does not fit uint16 tokens",
           path.c_str(), header_.vocab_size);
  // n_tokens is compared before it is multiplied: a huge count could otherwise wrap around to the file's size.
  const uint64_t token_room = (file_.size() - kShardHeaderBytes) / header_.token_bytes;
  SL_CHECK(header_.n_tokens == token_room && (file_.size() - kShardHeaderBytes) % header_.token_bytes == 0,
           "%s: truncated or padded shard: %zu bytes, header says %llu tokens of %u bytes", path.c_str(), file_.size(),
           (unsigned long long)header_.n_tokens, header_.token_bytes);
  SL_CHECK(header_.eos_id < header_.vocab_size, "%s: eos id %u outside the vocabulary of %u", path.c_str(),
           header_.eos_id, header_.vocab_size);
  SL_CHECK(header_.bos_id == kNoBos || header_.bos_id < header_.vocab_size, "%s: bos id %u outside the vocabulary of %u",
           path.c_str(), header_.bos_id, header_.vocab_size);
  tokens_ = p + kShardHeaderBytes;
  if (verify_checksum) {
    uint32_t crc = crc32_of(tokens_, header_.n_tokens * header_.token_bytes);
    SL_CHECK(crc == header_.crc32, "%s: corrupted shard (CRC-32 %08x, header says %08x)", path.c_str(), crc,
             header_.crc32);
  }
}

void Shard::read(uint64_t begin, uint64_t n, int32_t* out) const {
  SL_CHECK(begin + n <= header_.n_tokens, "%s: read [%llu, %llu) beyond %llu tokens", path_.c_str(),
           (unsigned long long)begin, (unsigned long long)(begin + n), (unsigned long long)header_.n_tokens);
  for (uint64_t i = 0; i < n; ++i) out[i] = int32_t(token(begin + i));
}

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size,
                 uint64_t n_documents, uint32_t eos_id, uint32_t bos_id) {
  uint32_t token_bytes = vocab_size <= 65536 ? 2 : 4;
  std::vector<unsigned char> body(tokens.size() * token_bytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    SL_CHECK(tokens[i] < vocab_size, "%s: token %u at %zu outside the vocabulary of %u", path.c_str(), tokens[i],
             i, vocab_size);
    if (token_bytes == 2) {
      uint16_t t = uint16_t(tokens[i]);
      std::memcpy(&body[i * 2], &t, 2);
    } else {
      std::memcpy(&body[i * 4], &tokens[i], 4);
    }
  }
  unsigned char header[kShardHeaderBytes] = {};
  auto put32 = [&](int off, uint32_t v) { std::memcpy(header + off, &v, 4); };
  auto put64 = [&](int off, uint64_t v) { std::memcpy(header + off, &v, 8); };
  std::memcpy(header, kShardMagic, 8);
  put32(8, kShardVersion);
  put32(12, kShardHeaderBytes);
  put32(16, vocab_size);
  put32(20, token_bytes);
  put64(24, tokens.size());
  put64(32, n_documents);
  put32(40, eos_id);
  put32(44, bos_id);
  put32(48, crc32_of(body.data(), body.size()));
  AtomicFile file(path);
  file.write(header, sizeof(header));
  file.write(body.data(), body.size());
  file.commit();
}

}  // namespace sinklab::io
