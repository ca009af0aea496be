#include "probe/host_taps.hpp"

#include "backend/ops.hpp"

namespace sinklab::probe {

// A contiguous host copy of t (undefined stays undefined, a host f32 tensor is used as it is); bf16 (a
// model under --precision bf16) widened to f32, which the probes read.
Tensor HostTaps::to_host(int slot, Tensor t) {
  if (!t.defined() || t.dtype != DType::bf16) return staged_copy(buffers_[size_t(slot)], t, Device::cpu());
  Buffer& b = buffers_[size_t(slot)];
  b.ensure(size_t(t.numel()) * sizeof(float), Device::cpu());
  Tensor host = Tensor::contiguous_view(b.data(), DType::f32, t.shape.data(), t.ndim, Device::cpu());
  ops::copy(host, t);
  return host;
}

void HostTaps::on_layer(const LayerTaps& taps) {
  LayerTaps host = taps;
  host.hidden_in = to_host(0, taps.hidden_in);
  host.hidden_out = to_host(1, taps.hidden_out);
  host.hidden_pre_norm = to_host(2, taps.hidden_pre_norm);
  host.q = to_host(3, taps.q);
  host.k = to_host(4, taps.k);
  host.v = to_host(5, taps.v);
  host.probs = Tensor{};  // not offered to the device model (probs_output): the inner observer forms it
  ops::AttentionSpec spec;
  if (taps.attention) {
    spec = *taps.attention;
    spec.relative_bias = to_host(6, spec.relative_bias);
    spec.sink_logit = to_host(7, spec.sink_logit);
    spec.d_relative_bias = Tensor{};
    spec.d_sink_logit = Tensor{};
    host.attention = &spec;
  }
  inner_.on_layer(host);
}

}  // namespace sinklab::probe
