// What a probe sees of one transformer layer while a model runs forward: the trainable transformer
// (model/) and every Hugging Face family (hf/) call a LayerObserver once per layer, and the
// measurements (probe/) are written once against this struct. Views are valid only during the call.
// The contract between the models and the probes, so it lives with the models (hf/ includes it from here).
#pragma once

#include <array>
#include <cstdint>

#include "backend/op_checks.hpp"
#include "backend/ops.hpp"

namespace sinklab {

struct LayerTaps {
  int layer = 0;
  Tensor hidden_in;   // [B,T,d] residual stream entering the layer
  Tensor hidden_out;  // [B,T,d] residual stream leaving the layer
  // Post-norm layers: the residual sum before the layer's last norm (where post-norm models keep their
  // massive activations, paper Fig. 7 left). Undefined for pre-norm layers.
  Tensor hidden_pre_norm;
  // The attention's inputs as the op sees them: q [B,T,H,dh], k/v [B,S,Hkv,dh] (after rotary embedding
  // and any kernel feature map; S = attention->lead_keys + T). Undefined for layers without attention
  // (e.g. Mamba layers).
  Tensor q, k, v;
  const ops::AttentionSpec* attention = nullptr;
  // Leading positions of the sequence that are not input text (a learnable sink token: 1). Position
  // lead_positions is the first text token x_1.
  int64_t lead_positions = 0;
  // The attention matrix [B,H,T,S] as ops::attention_probs writes it, formed by the layer's attention
  // op in the same pass: defined when the observer supplied a buffer (LayerObserver::probs_output),
  // which the observer may then overwrite. Undefined otherwise: the observer forms it from q and k.
  Tensor probs;
};

class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  // A buffer [B,H,T,S] (the dtype of q, on q's device) for the attention matrix of `layer`, which the
  // model then passes to ops::attention_forward and on as LayerTaps::probs; undefined (the default)
  // when the observer forms the matrix itself or not at all. Called once per attention layer, before
  // the attention op runs; the buffer must stay valid until on_layer returns.
  virtual Tensor probs_output(int layer, const std::array<int64_t, 4>& shape, DType dtype, Device device) {
    (void)layer, (void)shape, (void)dtype, (void)device;
    return Tensor{};
  }
  virtual void on_layer(const LayerTaps& taps) = 0;
};

// The taps of a layer with attention: the residual stream [B*T,d] entering and leaving it (reported as
// [B,T,d]), the attention op's inputs and spec, and the matrix it formed for the observer (or undefined).
inline LayerTaps attention_taps(int layer, int64_t batch, Tensor hidden_in, Tensor hidden_out, Tensor q, Tensor k,
                                Tensor v, const ops::AttentionSpec* spec, Tensor probs) {
  const int64_t seq = hidden_in.shape[0] / batch;
  LayerTaps taps;
  taps.layer = layer;
  taps.hidden_in = hidden_in.split_dim(0, batch, seq);
  taps.hidden_out = hidden_out.split_dim(0, batch, seq);
  taps.q = q;
  taps.k = k;
  taps.v = v;
  taps.attention = spec;
  taps.probs = probs;
  return taps;
}

// The buffer a layer's attention op is to fill for `observer` (null: none): probs_output for the
// shape of q [B,T,H,dh] and k [B,S,Hkv,dh].
inline Tensor observer_probs(LayerObserver* observer, int layer, const Tensor& q, const Tensor& k) {
  if (observer == nullptr) return Tensor{};
  return observer->probs_output(layer, {q.shape[0], q.shape[2], q.shape[1], k.shape[1]},
                                attention_stats_dtype(q.dtype), q.device);
}

}  // namespace sinklab
