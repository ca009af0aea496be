// A probe of a model that runs on another device (a GPU) or stores its activations in bf16: the probes
// (ModelProbe, the survey's measurements) read f32 host activations, so this observer copies each layer's
// taps to host buffers (widening bf16 to f32) and hands them on. The attention matrix is then formed on the host from the copied q and k (the inner
// observer's probs_output is not offered to the device model), and the attention spec's tensors (sink
// logits, relative bias) are copied with them. A probe reads few short sequences (a training run's
// evaluation: --probe-sequences x --probe-length), so the copies cost little next to the forward pass.
#pragma once

#include <array>

#include "backend/memory.hpp"
#include "model/layer_taps.hpp"

namespace sinklab::probe {

class HostTaps : public LayerObserver {
 public:
  explicit HostTaps(LayerObserver& inner) : inner_(inner) {}
  // The device model forms no matrix for the host observer: it forms its own from the copied q and k.
  Tensor probs_output(int, const std::array<int64_t, 4>&, DType, Device) override { return Tensor{}; }
  void on_layer(const LayerTaps& taps) override;

 private:
  // Host copies, in this order: hidden_in, hidden_out, hidden_pre_norm, q, k, v, relative_bias, sink_logit.
  static constexpr int kSlots = 8;
  Tensor to_host(int slot, Tensor t);
  LayerObserver& inner_;
  std::array<Buffer, kSlots> buffers_;
};

}  // namespace sinklab::probe
