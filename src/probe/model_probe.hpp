// The sink probe of a sinklab model: a LayerObserver that, during a model's forward pass (Transformer::forward_observe, an HF family), turns
// each layer's rotated q and k into the attention matrix (ops::attention_probs with the model's own
// attention spec) and accumulates the sink metric (sink_metrics.hpp), the massive-activation ratio
// ||h_1|| / mean_{t>=2} ||h_t|| of the layer's output hidden states, the first token's hidden-state and
// value norms beside the others', and the attention of query groups to the first token.
//
// Query groups (set_query_groups; one group of every query by default): each text query position of
// each sequence belongs to a group g (or none); per layer and head the probe averages over the queries
// of g, pooled over sequences (Guo et al. 2024's form: their BOS attention is the mean over every
// non-trigger query of a batch, the BOS query itself included):
//   first[g]     = mean_i A[i, 0]                         as the sink metric reads A (proxy scores where
//                                                         the rows are not a distribution)
//   first_raw[g] = mean_i P[i, 0]                         the weights as the attention op computed them
//   rest_raw[g]  = mean_{i >= 1} mean_{1 <= j <= i} P[i, j]   the weight of an average other visible key
// so a sink in proxy scores with tiny absolute weights (sigmoid without normalisation) shows as such.
//
// Marked keys (set_marked_keys; none by default): text positions j >= 1 that hold a token of interest
// (e.g. a BOS in the middle of a row that starts anywhere). marked_attention[l,h] = mean over the queries
// i that see at least one marked key of sum_{marked j <= i} A[i, j]: where a sink went when the first
// position is not the BOS.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "backend/memory.hpp"
#include "model/layer_taps.hpp"
#include "probe/sink_metrics.hpp"

namespace sinklab::probe {

// The mask of the probed model (ModelConfig's attn_window, prefix_length): which mask-relative metrics
// the probe measures beside the absolute alpha_k (sink_metrics.hpp defines them).
struct ProbeMask {
  int64_t window = 0;  // > 0, sliding window of w keys: alpha_k^win, k = 1..min(K, w), when T >= w
  int64_t prefix = 1;  // > 1, prefix LM: the per-position alpha of every position 1..T
};

struct ProbeResult {
  std::vector<float> alpha;          // [L,H]: sample-mean alpha_1 of every head
  std::vector<double> alpha_k;       // [L,H,K]: sample-mean alpha_k, k = 1..K
  std::vector<double> sink;          // Sink_1^eps in percent, one per eps (reference-code averaging)
  std::vector<double> sink_k;        // [K, eps]: Sink_k^eps in percent, k = 1..K (row 0 is `sink`)
  std::vector<float> massive_ratio;  // [L]: sample-mean ||h_1|| / mean_{t>=2} ||h_t|| of each block's output
  // Post-norm models: the same ratio of the residual sum before each block's last norm (Fig. 7 left).
  std::vector<float> massive_ratio_pre_norm;
  // Models with a bias position (learnable sink token x*, or a k*/v* key): Sink_*^eps in percent, the
  // share of heads whose mean attention to that position over the text rows exceeds eps (Tables 4-5).
  std::vector<double> sink_star;
  std::vector<float> alpha_star;  // [L,H]
  // Sliding-window models (T >= w): the same relative to each query's window start (window_importance_scores).
  std::vector<double> alpha_k_window;  // [L,H,Kw], Kw = min(K, w)
  std::vector<double> sink_k_window;   // [Kw, eps], percent
  // Prefix LMs: per-position alpha of every position (prefix_importance_scores), and its Sink per position.
  std::vector<double> alpha_pos;  // [L,H,T]
  std::vector<double> sink_pos;   // [T, eps], percent
  bool proxy_scores = false;      // rows were not a distribution: the paper's proxy scores were measured
  int64_t samples = 0;
  // ||h_0|| and the mean ||h_t|| (t >= 1) of each layer's output hidden states, and of its value vectors
  // (all kv heads of a position as one vector; after any lead keys), means over sequences.
  std::vector<double> hnorm_first, hnorm_rest, vnorm_first, vnorm_rest;  // [L]
  // Attention to the first text token by query group (above): [L,H,G]; NaN for a group without queries.
  int n_query_groups = 1;
  std::vector<double> first_attention, first_weight_raw, rest_weight_raw;
  std::vector<double> marked_attention;  // [L,H]; empty when no key was marked
  // Models with a sink logit (learned S_h, or softmax-plus-one's constant 0): the logit's share of a text row,
  // e^{S_h} / Z_i = 1 - sum_j P_ij over every key, mean over the text rows and sequences: [L,H]; else empty.
  std::vector<double> sink_logit_share;
};

// Probabilities are measured as the model computes them, except for variants whose rows are not a
// distribution (norm one / max(|sum|,1) / p-norm / alpha != 1): those use the paper's proxy scores
// w_ij / sum_j w_ij (|w| for signed similarities). Text positions are those after the model's lead
// positions (a sink token); text keys those after its lead keys (k*), so Sink_1 is always about x_1.
class ModelProbe : public LayerObserver {
 public:
  ModelProbe(int n_layers, int n_heads, int64_t seq_len, int max_k, std::vector<double> eps = default_sink_eps(),
             ProbeMask mask = {}, int n_query_groups = 1);
  // The groups of the next forward pass's queries: groups[b * T + i] in [0, G) for text query i of
  // sequence b, or -1 (left out). Empty: every query in group 0.
  void set_query_groups(std::vector<int8_t> groups) { query_groups_ = std::move(groups); }
  // The marked keys of the next forward pass: marked[b * T + j] != 0 marks text key j >= 1 of sequence b.
  void set_marked_keys(std::vector<uint8_t> marked) { marked_keys_ = std::move(marked); }
  // Whether alpha_k^win is measured (a sliding window no longer than the probe's sequences).
  bool measures_window() const { return window_.has_value(); }
  // The model's attention op fills the probe's buffer (f32 host activations; otherwise the probe forms
  // the matrix from q and k itself).
  Tensor probs_output(int layer, const std::array<int64_t, 4>& shape, DType dtype, Device device) override;
  void on_layer(const LayerTaps& taps) override;
  // Data-parallel probes: `allreduce_sum` is applied to every accumulated array in turn, after which
  // each rank holds the global sums.
  void reduce(const std::function<void(double*, size_t)>& allreduce_sum);
  ProbeResult result() const;

 private:
  SinkAccumulator sink_, sink_star_;
  ProbeMask mask_;
  std::optional<SinkAccumulator> window_, positions_;  // built up front: every rank reduces the same arrays
  bool has_star_ = false, has_pre_norm_ = false, proxy_ = false;
  std::vector<double> massive_sums_;  // [L] sums over samples, then the sample count
  std::vector<double> pre_norm_sums_;  // [L]
  std::vector<double> norm_sums_;      // [4, L]: hnorm_first, hnorm_rest, vnorm_first, vnorm_rest sums over sequences
  // [3, L, H, G] sums (first, first_raw, rest_raw) and [2, G] query counts (all, i >= 1): reduce() sums
  // them over ranks like every other state.
  std::vector<double> group_sums_, group_counts_;
  std::vector<int8_t> query_groups_;
  std::vector<uint8_t> marked_keys_;
  std::vector<double> marked_sums_;  // [L*H] sums, then the count of queries that saw a marked key
  void add_marked_attention(int layer, const Tensor& probs);
  std::vector<double> sink_logit_sums_;  // [L*H] sums of the sink logit's row shares, then the sequence count
  bool has_sink_logit_ = false;
  void add_sink_logit_share(int layer, const Tensor& probs, int64_t lead);
  int n_groups_;
  void add_first_token_attention(int layer, const Tensor& probs, bool raw);
  int64_t seq_len_;
  Buffer probs_buffer_;
};

}  // namespace sinklab::probe
