// The attention-sink metric of the paper (Sec. 3.2) and its companions (proxy scores of Sec. 7.4,
// massive activations, first-token norms), computed exactly as the authors' reference code does.
//
// INDEXING. The paper is 1-based: alpha_k = 1/(T-k+1) * sum_{i=k}^{T} A[i,k], k = 1..T. Code here is
// 0-based: position p = k-1, and alpha[p] = 1/(T-p) * sum_{i=p}^{T-1} A[i,p] — the mean of column p on
// and below the diagonal. Sink_k^eps (paper) is sink(p = k-1, eps) here; K positions p = 0..K-1 are
// kept. (The reference code sums the whole column; on a causal matrix, where A[i,p] = 0 for i < p, that
// is the same number.)
//
// Sink_k^eps = 100 * (1/L) sum_l (1/H) sum_h [alpha_k^{l,h} > eps]   (strict '>', in percent).
//
// AVERAGING OVER SAMPLES (docs/DESIGN.md, "Measuring the sink"). The metric is averaged over samples
// as the reference code does it (compute_attention_sink: importance scores per sample, `(scores >
// eps).mean(dim=(samples, layers, heads))`): each sample's alpha is thresholded and the indicator
// averaged over samples, layers and heads.
// That is the default, SinkAveraging::per_sample. SinkAveraging::mean_alpha instead thresholds the
// sample-averaged alpha of each (l,h) (what a figure of mean alpha per head shows); both are kept.
//
// Inputs are CPU tensors, f32 or f64, any strides. Attention probabilities come in the op API's
// attention_probs layout [B,H,T,S] for one layer (S >= T; key j < T is position j, keys beyond T —
// extra sink/bias keys a variant may append — are ignored by the metric). Each batch element is one
// sample.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "core/tensor.hpp"

namespace sinklab::probe {

enum class SinkAveraging : uint8_t { per_sample, mean_alpha };

// The thresholds of --sink-eps ("0.2,0.3,0.4"): numbers in (0, 1), at least one; else sinklab::Error
// naming the flag.
std::vector<double> parse_sink_eps(const std::string& text);

inline const std::vector<double>& default_sink_eps() {
  static const std::vector<double> eps = {0.2, 0.3, 0.4};
  return eps;
}

// alpha[p], p = 0..K-1, of one head's attention matrix A [T,S] (S >= T, K <= T); out has K entries.
void importance_scores(const Tensor& attn, int K, double* out);
std::vector<double> importance_scores(const Tensor& attn, int K);

// WINDOW ATTENTION (paper Sec. 6, Fig. 6 middle: with a sliding window the sink stays on the absolute
// first token, "but not on the 'first token' within each window"). Query i (0-based) of a window of w
// keys sees keys max(0, i-w+1)..i; its window is full when i >= w-1 and then starts at s_i = i-w+1.
// The importance score of offset k (1-based) from the window start, over the queries whose window is full:
//   alpha_k^win = 1/(T-w+1) * sum_{i=w-1}^{T-1} A[i, i-w+k]          k = 1..K, K <= w <= T
// (queries i < w-1 see the sequence start, whose first token is the absolute one that alpha_k measures).
// k = 1 is the window's "first token", k = w the query itself. out has K entries.
void window_importance_scores(const Tensor& attn, int64_t window, int K, double* out);

// PER-POSITION alpha (prefix LM, paper Sec. 6, Fig. 5 middle: the sink moves among the p prefix tokens,
// which every query sees). alpha_j of every key position j = 0..T-1 is the mean of column j over the
// queries that see key j:
//   j < p:  1/T     * sum_{i=0}^{T-1} A[i,j]      (the prefix: every query, the prefix rows included)
//   j >= p: 1/(T-j) * sum_{i=j}^{T-1} A[i,j]      (the paper's alpha_{j+1})
// so on a causal matrix (p <= 1) it is importance_scores with K = T, and 0 <= alpha_j <= 1 always (the
// reference code's whole-column sum over T-j would count the prefix rows above the diagonal but divide by
// T-j, exceeding 1 for a prefix key every query attends to). out has T entries.
void prefix_importance_scores(const Tensor& attn, int64_t prefix, double* out);

// Sink (percent) at position p from alpha laid out [n_heads_total, K] (all (layer, head) pairs).
double sink_from_alpha(const double* alpha, int64_t n_heads_total, int K, int p, double eps);

// Proxy attention scores (paper Sec. 7.4) for variants whose weights are not a distribution:
// P[..., i, j] = w_ij / (sum_j' w_ij' + 1e-8), or with |w| in both places when `absolute` (signed
// kernels: identity, MLP). w [..., T, S] (any rank >= 2, last dim = keys); the row sum runs over the
// whole row (masked entries must be 0, as attention_probs writes them). out has w's shape and may be
// w itself.
void proxy_scores(Tensor out, const Tensor& w, bool absolute);
// Whether an attention variant's rows are measured through proxy scores (they are not a distribution:
// norm one / max(|sum|,1) / p-norm, or rows summing to alpha != 1), and whether the proxy takes |w|
// (similarities that can be negative). One rule for the trainer's probe and the survey.
inline bool measured_by_proxy(const ops::AttentionSpec& s) {
  return s.norm != ops::AttnNorm::sum || s.norm_alpha != 1.0;
}
inline bool proxy_takes_abs(const ops::AttentionSpec& s) { return s.sim == ops::AttnSim::identity; }

// Accumulates alpha over samples for every (layer, head) and K positions.
class SinkAccumulator {
 public:
  SinkAccumulator(int n_layers, int n_heads, int K, std::vector<double> eps = default_sink_eps());

  // probs [B,H,T,S] of one layer; adds B samples to that layer. T >= K required.
  void add(int layer, const Tensor& probs);
  // Unnormalised weights [B,H,T,S]: converted to proxy scores (see proxy_scores), then add().
  void add_weights(int layer, const Tensor& weights, bool absolute);
  // probs [B,H,T,S] of a sliding-window layer: alpha_k^win (window_importance_scores) of B samples,
  // k = 1..K; K <= window <= T required.
  void add_window(int layer, const Tensor& probs, int64_t window);
  // probs [B,H,T,S] of a prefix-LM layer: per-position alpha (prefix_importance_scores) of B samples;
  // the accumulator's K must be T (every position).
  void add_prefix(int layer, const Tensor& probs, int64_t prefix);
  // alpha already computed, [B,H,K] (f32/f64) for one layer.
  void add_alpha(int layer, const Tensor& alpha);

  int n_layers() const { return L_; }
  int n_heads() const { return H_; }
  int K() const { return K_; }
  const std::vector<double>& eps() const { return eps_; }
  // Samples seen (the same for every layer once a sequence has been added to all; throws otherwise).
  int64_t samples() const;

  // Sample-mean alpha, [L,H,K] row-major.
  std::vector<double> mean_alpha() const;
  // Sink_{p+1}^{eps} in percent. eps must be one of eps() for per_sample (that is what is counted).
  double sink(int p, double eps, SinkAveraging avg = SinkAveraging::per_sample) const;
  // Sink at position p for every eps of eps(), in that order.
  std::vector<double> sinks(int p, SinkAveraging avg = SinkAveraging::per_sample) const;

  // The whole state as one flat array of doubles, so ranks can MPI-allreduce-sum it in place and every
  // rank then holds the global accumulator: [alpha sums L*H*K | above-eps counts E*L*H*K | samples L].
  std::vector<double>& state() { return state_; }
  const std::vector<double>& state() const { return state_; }
  void merge(const SinkAccumulator& other);
  void reset();

 private:
  size_t alpha_index(int l, int h, int p) const { return (size_t(l) * H_ + h) * K_ + p; }
  size_t count_index(int e, int l, int h, int p) const { return size_t(L_) * H_ * K_ * (1 + e) + alpha_index(l, h, p); }
  size_t samples_index(int l) const { return size_t(L_) * H_ * K_ * (1 + eps_.size()) + l; }
  int eps_index(double eps) const;
  void add_sample_alpha(int layer, int head, const double* alpha);
  // Adds B samples of probs [B,H,T,S]: alpha_of(probs, base, si, sj, T, out) fills one head's K scores.
  template <typename AlphaOf>
  void add_heads(int layer, const Tensor& probs, const char* op, AlphaOf alpha_of);

  int L_, H_, K_;
  std::vector<double> eps_;
  std::vector<double> state_;
};

// ||h_0|| / mean_{t>=1} ||h_t|| over rows of x [T,d] (0-based; the paper's ||h_1|| / mean_{t>=2}):
// the massive-activation ratio of one layer's hidden states (average a batch outside). T >= 2.
double massive_ratio(const Tensor& x);

// l2 norm of row 0 and the mean l2 norm of rows 1..T-1 of x [T,d] (hidden states, keys or values of
// one layer; for per-head k/v pass a [T, dh] view), or of x [T,G,d] read as [T, G*d] (all kv heads of a
// position as one vector, any strides: no copy). rest = 0 when T == 1. The row sums are accumulated in
// double, vectorised; long inputs split rows over threads, with the same result for any thread count.
struct FirstVsRest {
  double first = 0.0;
  double rest = 0.0;
};
FirstVsRest first_vs_rest_norms(const Tensor& x);

}  // namespace sinklab::probe
