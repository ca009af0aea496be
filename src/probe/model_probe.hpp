// The sink probe of a sinklab model: a LayerObserver that, during a model's forward pass (Transformer::forward_observe, an HF family), turns
// each layer's rotated q and k into the attention matrix (ops::attention_probs with the model's own
// attention spec) and accumulates the sink metric (sink_metrics.hpp) and the massive-activation ratio
// ||h_1|| / mean_{t>=2} ||h_t|| of the layer's output hidden states.
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
};

// Probabilities are measured as the model computes them, except for variants whose rows are not a
// distribution (norm one / max(|sum|,1) / p-norm / alpha != 1): those use the paper's proxy scores
// w_ij / sum_j w_ij (|w| for signed similarities). Text positions are those after the model's lead
// positions (a sink token); text keys those after its lead keys (k*), so Sink_1 is always about x_1.
class ModelProbe : public LayerObserver {
 public:
  ModelProbe(int n_layers, int n_heads, int64_t seq_len, int max_k, std::vector<double> eps = default_sink_eps(),
             ProbeMask mask = {});
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
  int64_t seq_len_;
  Buffer probs_buffer_;
};

}  // namespace sinklab::probe
