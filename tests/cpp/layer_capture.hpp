// A LayerObserver for tests: host copies of what a probe sees of every layer (the residual stream, q, k,
// v) and the attention probabilities the probe computes from q, k and the layer's AttentionSpec. Layers
// without attention (Jamba's Mamba layers) keep q/k/v/probs undefined. The taps must be host tensors (a
// GPU model's reach it through probe::HostTaps).
#pragma once

#include <gtest/gtest.h>

#include <vector>

#include "model/layer_taps.hpp"
#include "test_util.hpp"

namespace sinklab::test {

class LayerCapture : public LayerObserver {
 public:
  struct Layer {
    Owned hidden_in, hidden_out, hidden_pre_norm, q, k, v, probs;
    ops::AttentionSpec spec;
    int64_t lead_positions = -1;
  };
  void on_layer(const LayerTaps& taps) override {
    EXPECT_EQ(taps.layer, int(layers.size())) << "layers must be reported once each, in order";
    EXPECT_TRUE(taps.hidden_in.device.is_cpu()) << "the capture reads host taps";
    Layer l;
    l.hidden_in = Owned::copy_of(taps.hidden_in, DType::f32);
    l.hidden_out = Owned::copy_of(taps.hidden_out, DType::f32);
    if (taps.hidden_pre_norm.defined()) l.hidden_pre_norm = Owned::copy_of(taps.hidden_pre_norm, DType::f32);
    l.lead_positions = taps.lead_positions;
    if (taps.q.defined()) {
      l.q = Owned::copy_of(taps.q, DType::f32);
      l.k = Owned::copy_of(taps.k, DType::f32);
      l.v = Owned::copy_of(taps.v, DType::f32);
      EXPECT_NE(taps.attention, nullptr) << "layer " << taps.layer << " reports q without its attention spec";
      if (taps.attention) {
        l.spec = *taps.attention;
        const int64_t B = taps.q.shape[0], T = taps.q.shape[1], H = taps.q.shape[2];
        l.probs = Owned(DType::f32, {B, H, T, taps.k.shape[1]});
        ops::attention_probs(l.probs, taps.q, taps.k, *taps.attention);
      }
    }
    layers.push_back(std::move(l));
  }
  std::vector<Layer> layers;
};

}  // namespace sinklab::test
