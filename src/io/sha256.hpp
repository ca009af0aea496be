// SHA-256 (FIPS 180-4) of bytes and files: the survey matches a model's tokenizer.json to the survey
// inputs made with it (data_prep stores the tokenizer's sha256 in each inputs file).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace sinklab::io {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // The digest as 64 lowercase hex digits. Ends the computation (update afterwards throws).
  std::string hex_digest();

 private:
  void block(const uint8_t* p);  // one 64-byte block into state_
  std::array<uint32_t, 8> state_;
  std::array<uint8_t, 64> buffer_{};
  size_t buffered_ = 0;
  uint64_t length_ = 0;  // bytes so far
  bool finished_ = false;
};

std::string sha256_hex(std::string_view bytes);
// Throws sinklab::Error naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace sinklab::io
