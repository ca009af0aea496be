// Probe inputs (paper Sec. 3.3, Table 1): natural text, random tokens, one random token repeated.
// Every generator fills i32 [n, T] on the host, deterministically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "io/shard.hpp"

namespace sinklab::probe {

enum class InputMode { natural, random, repeat };
InputMode parse_input_mode(const std::string& name);  // "natural" | "random" | "repeat"; throws naming --input
const char* input_mode_name(InputMode mode);

// Sequence i = tokens [i*stride, i*stride + T) of the shard (stride >= T; the trainer uses its
// context C so that sequence i is the start of validation chunk i). Throws when the shard is too short.
void natural_inputs(Tensor out, const io::Shard& shard, int64_t stride);
// Tokens uniform over [0, vocab) minus `excluded` (special tokens), Philox stream (seed, 1).
void random_inputs(Tensor out, uint32_t vocab, const std::vector<uint32_t>& excluded, uint64_t seed);
// One such random token per sequence, repeated T times (Philox stream (seed, 2)).
void repeat_inputs(Tensor out, uint32_t vocab, const std::vector<uint32_t>& excluded, uint64_t seed);

}  // namespace sinklab::probe
