// The token ids the synthetic survey inputs draw from (paper Sec. 3.3: random tokens "sampled from the
// tokenizer vocabulary", special tokens excluded), read from a model directory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sinklab::probe {

struct SamplingVocabulary {
  uint32_t size = 0;              // ids [0, size) exist in the tokenizer and the model's embedding
  std::vector<uint32_t> special;  // ids never drawn (sorted, unique, all < size)
  std::string source;             // what the numbers were read from, for the results file
};

// From <dir>/tokenizer.json when present: size = 1 + the largest id of the tokenizer's vocabulary and
// added tokens (models pad their embedding beyond it: those rows were never trained), special = the
// added tokens marked special. Else from <dir>/vocab.json (GPT-2/OPT without tokenizer.json): size = 1 +
// its largest id, special = the tokens tokenizer_config.json / special_tokens_map.json name (bos, eos,
// unk, pad, special added tokens). Otherwise size = model_vocab_size. Either way the ids config.json names
// as bos/eos/pad/unk tokens are special too, and size is capped at model_vocab_size. Unreadable JSON
// throws sinklab::Error naming the file.
SamplingVocabulary sampling_vocabulary(const std::string& model_dir, int64_t model_vocab_size);

}  // namespace sinklab::probe
