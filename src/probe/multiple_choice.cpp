#include "probe/multiple_choice.hpp"

#include <algorithm>
#include <cstdint>

#include "backend/memory.hpp"
#include "core/error.hpp"
#include "io/h5.hpp"
#include "probe/survey_metrics.hpp"

namespace sinklab::probe {
namespace {

std::vector<int64_t> read_ints(const io::ResultsFile& f, const std::string& path, const std::string& ds) {
  SL_CHECK(f.exists("/" + ds), "%s: no /%s (not a data_prep hellaswag file?)", path.c_str(), ds.c_str());
  SL_CHECK(f.dims("/" + ds).size() == 1, "%s: /%s is not 1-D", path.c_str(), ds.c_str());
  return f.read_column_int("/" + ds);
}

// Checks that offsets start at 0, never decrease and end at `total`.
void check_offsets(const std::vector<int64_t>& offsets, int64_t total, const std::string& path, const char* ds) {
  SL_CHECK(offsets.size() >= 2 && offsets.front() == 0 && offsets.back() == total, "%s: /%s must run from 0 to %lld",
           path.c_str(), ds, (long long)total);
  for (size_t i = 1; i < offsets.size(); ++i)
    SL_CHECK(offsets[i] > offsets[i - 1], "%s: /%s[%zu] = %lld does not follow %lld", path.c_str(), ds, i,
             (long long)offsets[i], (long long)offsets[i - 1]);
}

}  // namespace

MultipleChoiceSet read_multiple_choice(const std::string& path, int64_t n_examples, int64_t vocab_size) {
  const io::ResultsFile f = io::ResultsFile::open_read(path);
  MultipleChoiceSet s;
  s.path = path;
  const std::vector<int64_t> tokens = read_ints(f, path, "tokens");
  s.choice_offsets = read_ints(f, path, "choice_offsets");
  s.example_offsets = read_ints(f, path, "example_offsets");
  const std::vector<int64_t> cont_start = read_ints(f, path, "cont_start"), choice_chars = read_ints(f, path, "choice_chars"),
                             label = read_ints(f, path, "label");
  check_offsets(s.choice_offsets, int64_t(tokens.size()), path, "choice_offsets");
  const int64_t C = int64_t(s.choice_offsets.size()) - 1;
  check_offsets(s.example_offsets, C, path, "example_offsets");
  const int64_t N_all = int64_t(s.example_offsets.size()) - 1;
  SL_CHECK(int64_t(cont_start.size()) == C && int64_t(choice_chars.size()) == C, "%s: /cont_start and /choice_chars "
           "must have one entry per choice (%lld)", path.c_str(), (long long)C);
  SL_CHECK(int64_t(label.size()) == N_all, "%s: /label must have one entry per example (%lld)", path.c_str(),
           (long long)N_all);
  const int64_t N = n_examples > 0 ? std::min(n_examples, N_all) : N_all;
  const int64_t C_used = s.example_offsets[size_t(N)];
  s.example_offsets.resize(size_t(N + 1));
  s.choice_offsets.resize(size_t(C_used + 1));
  for (int64_t e = 0; e < N; ++e) {
    const int64_t n_choices = s.example_offsets[size_t(e + 1)] - s.example_offsets[size_t(e)];
    SL_CHECK(label[size_t(e)] >= 0 && label[size_t(e)] < n_choices, "%s: /label[%lld] = %lld is not one of its %lld choices",
             path.c_str(), (long long)e, (long long)label[size_t(e)], (long long)n_choices);
    s.label.push_back(int32_t(label[size_t(e)]));
  }
  for (int64_t c = 0; c < C_used; ++c) {
    const int64_t len = s.choice_offsets[size_t(c + 1)] - s.choice_offsets[size_t(c)];
    SL_CHECK(cont_start[size_t(c)] >= 1 && cont_start[size_t(c)] < len, "%s: /cont_start[%lld] = %lld leaves no context "
             "or no continuation in a choice of %lld tokens", path.c_str(), (long long)c, (long long)cont_start[size_t(c)],
             (long long)len);
    SL_CHECK(choice_chars[size_t(c)] >= 1 && choice_chars[size_t(c)] <= INT32_MAX, "%s: /choice_chars[%lld] = %lld is not "
             "a length in characters", path.c_str(), (long long)c, (long long)choice_chars[size_t(c)]);
    s.cont_start.push_back(int32_t(cont_start[size_t(c)]));
    s.choice_chars.push_back(int32_t(choice_chars[size_t(c)]));
  }
  const int64_t used_tokens = s.choice_offsets.back();
  for (int64_t i = 0; i < used_tokens; ++i) {
    SL_CHECK(tokens[size_t(i)] >= 0 && tokens[size_t(i)] < vocab_size, "%s: /tokens[%lld] = %lld is outside the model's "
             "vocabulary (%lld)", path.c_str(), (long long)i, (long long)tokens[size_t(i)], (long long)vocab_size);
    s.tokens.push_back(int32_t(tokens[size_t(i)]));
  }
  return s;
}

MultipleChoiceScores score_multiple_choice(hf::HfModel& model, const MultipleChoiceSet& set,
                                           const std::function<void()>& progress) {
  const int64_t V = model.info().vocab_size, N = set.n_examples();
  MultipleChoiceScores scores;
  ProgressObserver observer(nullptr, progress);  // no attention matrix asked for
  hf::ForwardOptions forward;
  forward.want_logits = true;
  int64_t correct = 0, correct_norm = 0;
  for (int64_t e = 0; e < N; ++e) {
    const int64_t first = set.example_offsets[size_t(e)], B = set.example_offsets[size_t(e + 1)] - first;
    int64_t T = 0;
    std::vector<int64_t> start(static_cast<size_t>(B)), end(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) {
      end[size_t(b)] = set.choice_offsets[size_t(first + b + 1)] - set.choice_offsets[size_t(first + b)];
      start[size_t(b)] = set.cont_start[size_t(first + b)];
      T = std::max(T, end[size_t(b)]);
    }
    SL_CHECK(model.info().max_positions == 0 || T <= model.info().max_positions,
             "%s: example %lld has a choice of %lld tokens; the model takes at most %lld positions", set.path.c_str(),
             (long long)e, (long long)T, (long long)model.info().max_positions);
    // Right padding repeats each choice's last token (any id would do: nothing reads those positions).
    Buffer ids_buffer = Buffer::for_tensor(DType::i32, {B, T}), logits_buffer = Buffer::for_tensor(DType::f32, {B, T, V});
    Tensor ids = ids_buffer.view(DType::i32, {B, T}), logits = logits_buffer.view(DType::f32, {B, T, V});
    for (int64_t b = 0; b < B; ++b) {
      const int32_t* choice = set.tokens.data() + set.choice_offsets[size_t(first + b)];
      for (int64_t t = 0; t < T; ++t) ids.ptr<int32_t>()[b * T + t] = choice[std::min(t, end[size_t(b)] - 1)];
    }
    model.forward(ids, &observer, logits, forward);
    const std::vector<double> loglik = continuation_logliks(logits, ids, start, end);
    int32_t best = 0, best_norm = 0;
    for (int64_t b = 0; b < B; ++b) {
      const double per_char = loglik[size_t(b)] / double(set.choice_chars[size_t(first + b)]);
      if (loglik[size_t(b)] > loglik[size_t(best)]) best = int32_t(b);
      if (per_char > loglik[size_t(best_norm)] / double(set.choice_chars[size_t(first + best_norm)])) best_norm = int32_t(b);
      scores.loglik.push_back(loglik[size_t(b)]);
      scores.n_cont_tokens.push_back(int32_t(end[size_t(b)] - start[size_t(b)]));
    }
    scores.pred.push_back(best);
    scores.pred_norm.push_back(best_norm);
    correct += best == set.label[size_t(e)];
    correct_norm += best_norm == set.label[size_t(e)];
    if (progress) progress();
  }
  scores.acc = N > 0 ? double(correct) / double(N) : 0.0;
  scores.acc_norm = N > 0 ? double(correct_norm) / double(N) : 0.0;
  return scores;
}

}  // namespace sinklab::probe
