// Philox4x32-10 (Salmon et al., SC'11), the counter-based generator of Random123/cuRAND. A value is a
// pure function of (key, counter), so the CPU and a CUDA kernel produce the same stream from the same
// (seed, stream, index) without sharing state.
//
// sinklab's stream convention: key = seed (low word, high word); the 128-bit counter is
// (block_lo, block_hi, stream_lo, stream_hi) where block = index / 4 and the value is word index % 4.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.hpp"

namespace sinklab {

struct Philox4x32 {
  uint32_t v[4];
};

SL_HD void philox_mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  hi = uint32_t(p >> 32);
  lo = uint32_t(p);
}

// The raw block function: 10 rounds, key bumped between rounds.
SL_HD Philox4x32 philox4x32_10(Philox4x32 ctr, uint32_t key0, uint32_t key1) {
  const uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  const uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key0 += kWeyl0;
      key1 += kWeyl1;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(kMul0, ctr.v[0], hi0, lo0);
    philox_mulhilo(kMul1, ctr.v[2], hi1, lo1);
    Philox4x32 next = {{hi1 ^ ctr.v[1] ^ key0, lo1, hi0 ^ ctr.v[3] ^ key1, lo0}};
    ctr = next;
  }
  return ctr;
}

// Word `index` of stream (seed, stream).
SL_HD uint32_t philox_u32(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t block = index >> 2;
  Philox4x32 ctr = {{uint32_t(block), uint32_t(block >> 32), uint32_t(stream), uint32_t(stream >> 32)}};
  Philox4x32 out = philox4x32_10(ctr, uint32_t(seed), uint32_t(seed >> 32));
  // The word picked by constant indices: out.v[index & 3] indexes the array at run time, which on a GPU
  // puts it in local memory (a stack frame in every fill kernel).
  const uint64_t word = index & 3;
  return word == 0 ? out.v[0] : (word == 1 ? out.v[1] : (word == 2 ? out.v[2] : out.v[3]));
}

// Uniform in the open interval (0, 1): the top 24 bits, centred in their bucket.
SL_HD float philox_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return (float(philox_u32(seed, stream, index) >> 8) + 0.5f) * (1.0f / 16777216.0f);
}

// Standard normal number `index` of the stream: Box-Muller over words 2*index and 2*index+1, evaluated
// in double so host and device round to the same float.
SL_HD float philox_normal(uint64_t seed, uint64_t stream, uint64_t index) {
  double u1 = (double(philox_u32(seed, stream, 2 * index) >> 8) + 0.5) * (1.0 / 16777216.0);
  double u2 = (double(philox_u32(seed, stream, 2 * index + 1) >> 8) + 0.5) * (1.0 / 16777216.0);
  return float(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

}  // namespace sinklab
