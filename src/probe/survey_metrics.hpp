// The measurements the survey takes of a pretrained model (paper Sec. 3 and App. B), as one
// LayerObserver over any model that reports its layers (hf/ families, the trainable model).
// Everything is averaged over the sequences seen; positions are 0-based (position 0 is the paper's
// token 1). Per forward pass of B sequences of T tokens, for every layer l the model reports:
//
//   hidden states r^l [B,T,d] leaving the layer (hidden_out; the last layer's are before the final norm,
//       as App. B.3 asks):
//     hnorm_first[l] = mean_b ||r_0||, hnorm_rest[l] = mean_b mean_{t>=1} ||r_t||   (first_vs_rest_norms)
//     massive_ratio[l] = mean_b ||r_0|| / mean_{t>=1} ||r_t||                         (massive_ratio)
//   post-norm layers (OPT-350M) also the same three of hidden_pre_norm, the residual sum before the
//   layer's last norm where post-norm models keep their massive activations (paper Fig. 7 left), as
//   hnorm_first_pre_norm, hnorm_rest_pre_norm, massive_ratio_pre_norm (as ModelProbe does);
//   and, for the attention layers a (Jamba: a subset; attention_layers lists them):
//     alpha[a,h,k], Sink_k^eps       SinkAccumulator over the attention matrices A^{a,h} (ops::attention_probs
//                                    with the model's own AttentionSpec; grouped-query heads read kv
//                                    head h / (H / Hkv)), per-sample thresholding as the reference code
//     knorm_first/rest[a], vnorm_first/rest[a]   as hnorm, over the key / value vectors of all kv heads
//                                    concatenated (k as the op sees it: after rotary embedding)
//     last_to_first[a,h] = mean_b A[T-1, 0]   (the last token's attention to the first: StreamingLLM's
//                                    long-input figure, at T = 4096 in the survey)
//   for chosen (layer, head) pairs (Figs. 2, 15-18; 25-26), [T,T] maps over (query t, key j), all t, j:
//     qk_cos[t,j] = mean_b cos(q_t, k_j),  qk_normprod[t,j] = mean_b ||q_t|| ||k_j||
//     attention_map[t,j] = mean_b A[t,j]   (0 above the diagonal)
//
// Activations must be on the host (f32 or f64). The attention matrix is the one the model's attention op
// formed (probs_output) when it fits kFusedProbsMaxBytes; else it is formed here one head at a time, so
// the scratch memory is B*T*S values whatever the number of heads (T = 4096: 64 MiB per sequence).
// Sequences and (sequence, head) pairs are measured in parallel (OpenMP) into their own slots and
// summed in index order: the result does not depend on the number of threads.
// Rows whose weights are not a distribution (norm one, max(|sum|,1), p-norm, alpha != 1) are read as
// the paper's proxy scores, as ModelProbe does. Models with lead positions or lead keys (a learnable
// sink token, k*/v* biases: sinklab's own variants, measured by sinklab-probe) are refused.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "backend/memory.hpp"
#include "model/layer_taps.hpp"
#include "probe/sink_metrics.hpp"

namespace sinklab::probe {

// A (layer, query head) pair, 0-based; layer counts all the layers the model reports.
struct HeadPair {
  int layer = 0;
  int head = 0;
  bool operator==(const HeadPair& o) const { return layer == o.layer && head == o.head; }
};

// "l:h,l:h,..." (an empty text gives none). A negative layer counts from the end (-1: the last layer),
// resolved by resolve_head_pairs. Malformed text throws naming --flag.
std::vector<HeadPair> parse_head_pairs(const std::string& text, const char* flag);

// The pairs that exist in a model (negative layers resolved against n_layers), in the given order;
// each pair that does not (no such layer, a layer without attention, no such head) is left out and
// described in `skipped` ("5:0 (layer 5 has no attention)").
std::vector<HeadPair> resolve_head_pairs(const std::vector<HeadPair>& pairs, int n_layers,
                                         const std::vector<int>& attention_layers, int n_heads,
                                         std::vector<std::string>* skipped);

// Next-token cross-entropy of a batch, in nats, summed: sum over sequences b and positions t < T-1 of
// -log softmax(logits[b,t])[ids[b,t+1]] (ops::cross_entropy; the last position predicts nothing). The
// survey's `loss` is the sum over all batches / (n (T-1)). logits f32/f64 [B,T,V], ids i32 [B,T] with
// ids < V, both contiguous on the host.
double next_token_loss_sum(Tensor logits, Tensor ids);

// log p(ids[b, start_b:end_b] | ids[b, :start_b]) per sequence b: the sum over t in [start_b, end_b) of
// log softmax(logits[b, t-1])[ids[b, t]] (ops::cross_entropy with the other positions ignored), in double;
// the multiple-choice scorer's continuation score. Shapes as next_token_loss_sum; 1 <= start_b <= end_b <= T.
std::vector<double> continuation_logliks(Tensor logits, Tensor ids, const std::vector<int64_t>& start,
                                         const std::vector<int64_t>& end);

struct SurveyShape {
  int n_layers = 0;                   // layers the model reports to the observer
  std::vector<int> attention_layers;  // ascending indices of the layers with attention (at least one)
  int n_heads = 0, n_kv_heads = 0;    // query heads; key/value heads (n_heads a multiple of it)
  int64_t seq_len = 0;                // T >= 2
  int max_k = 1;                      // alpha_k and Sink_k for positions 0..K-1, K <= T
  std::vector<double> eps = default_sink_eps();
};

struct SurveyResult {
  int64_t samples = 0;
  std::vector<double> alpha;                          // [La,H,K]
  std::vector<double> sink_k;                         // [K,E] percent; row 0 is Sink_1^eps
  std::vector<double> hnorm_first, hnorm_rest;        // [L]
  std::vector<double> massive_ratio;                  // [L]
  // Empty unless a layer reported hidden_pre_norm (then [L]; 0 for layers that did not).
  std::vector<double> hnorm_first_pre_norm, hnorm_rest_pre_norm, massive_ratio_pre_norm;
  std::vector<double> knorm_first, knorm_rest;        // [La]
  std::vector<double> vnorm_first, vnorm_rest;        // [La]
  std::vector<double> last_to_first;                  // [La,H]
  std::vector<float> qk_cos, qk_normprod;             // [Pq,T,T]
  std::vector<float> attention_maps;                  // [Pa,T,T]
};

// Forwards every layer to `inner` (when there is one: a pass that measures only its loss has none), then
// lets the caller run: the survey's rank 0 serves the work queue from `progress`, and any rank checks for
// a stop request.
class ProgressObserver : public LayerObserver {
 public:
  ProgressObserver(LayerObserver* inner, const std::function<void()>& progress) : inner_(inner), progress_(progress) {}
  Tensor probs_output(int layer, const std::array<int64_t, 4>& shape, DType dtype, Device device) override {
    return inner_ ? inner_->probs_output(layer, shape, dtype, device) : Tensor{};
  }
  void on_layer(const LayerTaps& taps) override {
    if (inner_) inner_->on_layer(taps);
    if (progress_) progress_();
  }

 private:
  LayerObserver* inner_;
  const std::function<void()>& progress_;
};

class SurveyProbe : public LayerObserver {
 public:
  // The pairs must exist in the model (resolve_head_pairs); otherwise sinklab::Error.
  SurveyProbe(SurveyShape shape, std::vector<HeadPair> qk_maps = {}, std::vector<HeadPair> attention_maps = {});
  // The model's attention op fills the whole matrix [B,H,T,S] in this buffer when it is at most
  // kFusedProbsMaxBytes (host f32/f64); larger ones (long inputs) are formed one head at a time here.
  Tensor probs_output(int layer, const std::array<int64_t, 4>& shape, DType dtype, Device device) override;
  void on_layer(const LayerTaps& taps) override;
  static constexpr size_t kFusedProbsMaxBytes = size_t(64) << 20;
  // Means over the sequences seen (every layer must have seen the same ones).
  SurveyResult result() const;

  const SurveyShape& shape() const { return shape_; }
  const std::vector<HeadPair>& qk_pairs() const { return qk_pairs_; }
  const std::vector<HeadPair>& attention_pairs() const { return attention_pairs_; }

 private:
  int attention_index(int layer) const;  // position of `layer` in attention_layers, -1 if none
  void add_attention(int a, const LayerTaps& taps);
  void add_qk_map(size_t pair, const LayerTaps& taps, int head);

  SurveyShape shape_;
  std::vector<HeadPair> qk_pairs_, attention_pairs_;
  SinkAccumulator sink_;
  // Sums over sequences; the per-layer sequence counts check that every layer saw every sequence.
  std::vector<double> hnorm_first_, hnorm_rest_, massive_, layer_samples_;
  std::vector<double> pre_first_, pre_rest_, pre_massive_;
  bool has_pre_norm_ = false;
  std::vector<double> knorm_first_, knorm_rest_, vnorm_first_, vnorm_rest_, last_to_first_;
  std::vector<double> qk_cos_, qk_normprod_, attention_maps_;
  Buffer probs_buffer_, alpha_buffer_, fused_probs_buffer_;
};

}  // namespace sinklab::probe
