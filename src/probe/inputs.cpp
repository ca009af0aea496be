#include "probe/inputs.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/philox.hpp"

namespace sinklab::probe {

InputMode parse_input_mode(const std::string& name) {
  if (name == "natural") return InputMode::natural;
  if (name == "random") return InputMode::random;
  if (name == "repeat") return InputMode::repeat;
  SL_FAIL("--input must be natural, random or repeat, not '%s'", name.c_str());
}

const char* input_mode_name(InputMode mode) {
  switch (mode) {
    case InputMode::natural: return "natural";
    case InputMode::random: return "random";
    case InputMode::repeat: return "repeat";
  }
  return "?";
}

void natural_inputs(Tensor out, const io::Shard& shard, int64_t stride) {
  const int64_t n = out.shape[0], T = out.shape[1];
  SL_CHECK(stride >= T, "natural inputs: stride %lld shorter than T=%lld", (long long)stride, (long long)T);
  const uint64_t need = uint64_t((n - 1) * stride + T);
  SL_CHECK(shard.size() >= need, "%s: %llu tokens, fewer than the %llu needed for %lld sequences of %lld",
           shard.path().c_str(), (unsigned long long)shard.size(), (unsigned long long)need, (long long)n, (long long)T);
  for (int64_t i = 0; i < n; ++i) shard.read(uint64_t(i * stride), uint64_t(T), out.ptr<int32_t>() + i * T);
}

namespace {

// Token number `index` of stream (seed, stream), uniform over the allowed ids (rejection of excluded).
int32_t allowed_token(uint32_t vocab, const std::vector<uint32_t>& excluded, uint64_t seed, uint64_t stream,
                      uint64_t index) {
  for (uint64_t attempt = 0;; ++attempt) {
    uint32_t t = philox_u32(seed, stream, index * 64 + attempt) % vocab;  // bias < vocab / 2^32
    if (std::find(excluded.begin(), excluded.end(), t) == excluded.end()) return int32_t(t);
    SL_CHECK(attempt < 63, "no allowed token: every id of the vocabulary (%u) is excluded", vocab);
  }
}

}  // namespace

void random_inputs(Tensor out, uint32_t vocab, const std::vector<uint32_t>& excluded, uint64_t seed) {
  for (int64_t i = 0; i < out.numel(); ++i) out.ptr<int32_t>()[i] = allowed_token(vocab, excluded, seed, 1, uint64_t(i));
}

void repeat_inputs(Tensor out, uint32_t vocab, const std::vector<uint32_t>& excluded, uint64_t seed) {
  const int64_t n = out.shape[0], T = out.shape[1];
  for (int64_t i = 0; i < n; ++i)
    std::fill_n(out.ptr<int32_t>() + i * T, T, allowed_token(vocab, excluded, seed, 2, uint64_t(i)));
}

}  // namespace sinklab::probe
