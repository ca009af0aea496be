#include "io/sha256.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace sinklab::io {
namespace {

// The constants of FIPS 180-4 Sec. 4.2.2 / 5.3.3 from their definition, in exact integer arithmetic:
// the first 32 bits of the fractional parts of the square roots (initial hash) and cube roots (round
// constants) of the first primes.
using u128 = unsigned __int128;

uint64_t integer_root(u128 x, int degree) {  // floor(x^(1/degree)) for degree 2 or 3
  uint64_t lo = 0, hi = uint64_t(1) << 40;  // roots below 2^35 here; hi^3 fits in 128 bits
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    u128 p = mid;
    for (int i = 1; i < degree; ++i) p *= mid;
    if (p <= x) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

uint32_t fractional_bits(uint32_t prime, int degree) {  // floor(frac(prime^(1/degree)) * 2^32)
  const u128 scaled = u128(prime) << (32 * degree);
  return uint32_t(integer_root(scaled, degree));  // low 32 bits = fractional part
}

struct Constants {
  std::array<uint32_t, 8> initial;
  std::array<uint32_t, 64> round;
  Constants() {
    int found = 0;
    for (uint32_t n = 2; found < 64; ++n) {
      bool prime = true;
      for (uint32_t d = 2; d * d <= n; ++d) prime = prime && n % d != 0;
      if (!prime) continue;
      if (found < 8) initial[size_t(found)] = fractional_bits(n, 2);
      round[size_t(found)] = fractional_bits(n, 3);
      ++found;
    }
  }
};

const Constants& constants() {
  static const Constants c;
  return c;
}

inline uint32_t rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

}  // namespace

Sha256::Sha256() : state_(constants().initial) {}

void Sha256::block(const uint8_t* p) {
  const auto& K = constants().round;
  uint32_t w[64];
  for (int t = 0; t < 16; ++t)
    w[t] = uint32_t(p[4 * t]) << 24 | uint32_t(p[4 * t + 1]) << 16 | uint32_t(p[4 * t + 2]) << 8 | uint32_t(p[4 * t + 3]);
  for (int t = 16; t < 64; ++t) {
    const uint32_t s0 = rotr(w[t - 15], 7) ^ rotr(w[t - 15], 18) ^ (w[t - 15] >> 3);
    const uint32_t s1 = rotr(w[t - 2], 17) ^ rotr(w[t - 2], 19) ^ (w[t - 2] >> 10);
    w[t] = s1 + w[t - 7] + s0 + w[t - 16];
  }
  uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3];
  uint32_t e = state_[4], f = state_[5], g = state_[6], h = state_[7];
  for (int t = 0; t < 64; ++t) {
    const uint32_t t1 = h + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + K[size_t(t)] + w[t];
    const uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + t2;
  }
  state_[0] += a, state_[1] += b, state_[2] += c, state_[3] += d;
  state_[4] += e, state_[5] += f, state_[6] += g, state_[7] += h;
}

void Sha256::update(const void* data, size_t n) {
  SL_CHECK(!finished_, "Sha256: update after hex_digest");
  const uint8_t* p = static_cast<const uint8_t*>(data);
  length_ += n;
  while (n > 0) {
    const size_t take = std::min(n, buffer_.size() - buffered_);
    std::memcpy(buffer_.data() + buffered_, p, take);
    buffered_ += take, p += take, n -= take;
    if (buffered_ == buffer_.size()) {
      block(buffer_.data());
      buffered_ = 0;
    }
  }
}

std::string Sha256::hex_digest() {
  SL_CHECK(!finished_, "Sha256: hex_digest called twice");
  // Padding: 0x80, zeros to 56 mod 64, the message length in bits as a big-endian u64.
  const uint64_t bits = length_ * 8;
  const uint8_t one = 0x80, zero = 0;
  update(&one, 1);
  while (buffered_ != 56) update(&zero, 1);
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(bits >> (56 - 8 * i));
  update(len, 8);
  finished_ = true;
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (uint32_t word : state_)
    for (int shift = 28; shift >= 0; shift -= 4) out.push_back(hex[(word >> shift) & 0xf]);
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex_digest();
}

std::string sha256_file(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  SL_CHECK(f != nullptr, "cannot read %s: %s", path.c_str(), std::strerror(errno));
  Sha256 h;
  std::vector<char> buf(size_t(1) << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) h.update(buf.data(), n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  SL_CHECK(!failed, "cannot read %s", path.c_str());
  return h.hex_digest();
}

}  // namespace sinklab::io
