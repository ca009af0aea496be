// What a probe sees of one transformer layer while a model runs forward: the trainable transformer
// (model/) and every Hugging Face family (hf/) call a LayerObserver once per layer, and the
// measurements (probe/) are written once against this struct. Views are valid only during the call.
#pragma once

#include <cstdint>

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
};

class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  virtual void on_layer(const LayerTaps& taps) = 0;
};

}  // namespace sinklab
