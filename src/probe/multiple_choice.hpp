// Multiple-choice scoring by log-likelihood (HellaSwag, paper Fig. 10: the sink beside downstream
// accuracy), as lm-evaluation-harness scores it: each choice is a context followed by a continuation;
// its score is log p(continuation | context) = sum over the continuation's tokens of log softmax of the
// logits that predict them. The prediction is the choice of highest score (acc), or of highest score per
// character of the choice's text (acc_norm).
//
// Input: a data_prep hellaswag file (one per tokenizer; the text is tokenised there, with the model's
// default special tokens):
//   /tokens         int32 [total]  every choice's context + continuation tokens, back to back
//   /choice_offsets int64 [C+1]    choice c is tokens[choice_offsets[c], choice_offsets[c+1])
//   /cont_start     int32 [C]      position inside its choice where the continuation starts (>= 1)
//   /choice_chars   int32 [C]      characters of the choice's text (acc_norm's length)
//   /example_offsets int64 [N+1]   example e's choices are [example_offsets[e], example_offsets[e+1])
//   /label          int32 [N]      the correct choice of each example (0-based, within the example)
//   attrs: kind = "hellaswag", tokenizer_sha256, prefix_id, source_file, n_examples
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "hf/hf_model.hpp"

namespace sinklab::probe {

struct MultipleChoiceSet {
  std::string path;
  std::vector<int32_t> tokens;
  std::vector<int64_t> choice_offsets, example_offsets;
  std::vector<int32_t> cont_start, choice_chars, label;
  int64_t n_examples() const { return int64_t(label.size()); }
};

// The first min(n_examples, all) examples of a data_prep hellaswag file (0 = all), every offset, label
// and token id checked (ids against vocab_size). Throws naming the file and the dataset.
MultipleChoiceSet read_multiple_choice(const std::string& path, int64_t n_examples, int64_t vocab_size);

struct MultipleChoiceScores {
  std::vector<double> loglik;          // [C] log p(continuation | context), nats
  std::vector<int32_t> n_cont_tokens;  // [C]
  std::vector<int32_t> pred, pred_norm;  // [N] argmax of loglik, of loglik / choice_chars (first on ties)
  double acc = 0, acc_norm = 0;        // fractions of examples whose prediction is the label
};

// Scores every example with one forward pass of its choices, right-padded to the longest: the models
// are causal, so what follows a token cannot change the logits that predict it. `progress` is called
// after every example.
MultipleChoiceScores score_multiple_choice(hf::HfModel& model, const MultipleChoiceSet& set,
                                           const std::function<void()>& progress);

}  // namespace sinklab::probe
