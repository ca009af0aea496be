#include "probe/model_probe.hpp"

#include "core/error.hpp"

namespace sinklab::probe {

ModelProbe::ModelProbe(int n_layers, int n_heads, int64_t seq_len, int max_k, std::vector<double> eps)
    : sink_(n_layers, n_heads, max_k, std::move(eps)), massive_sums_(size_t(n_layers) + 1, 0.0), seq_len_(seq_len) {}

void ModelProbe::on_layer(const LayerTaps& taps) {
  const int64_t B = taps.q.shape[0], T = taps.q.shape[1], H = taps.q.shape[2], d = taps.hidden_out.shape[2];
  SL_CHECK(T == seq_len_, "probe built for T=%lld, got sequences of %lld tokens", (long long)seq_len_, (long long)T);
  // The probe runs on the host: device activations are copied over first.
  const int64_t need = B * H * T * T;
  if (probs_buffer_.bytes() < size_t(need) * sizeof(float)) probs_buffer_ = Buffer(size_t(need) * sizeof(float), Device::cpu());
  Tensor probs = probs_buffer_.view(DType::f32, {B, H, T, T});
  SL_CHECK(taps.q.device.is_cpu(), "the sink probe needs CPU activations (device probing arrives with the CUDA issue)");
  ops::attention_probs(probs, taps.q, taps.k, *taps.attention);
  sink_.add(taps.layer, probs);
  for (int64_t b = 0; b < B; ++b)
    massive_sums_[size_t(taps.layer)] += massive_ratio(taps.hidden_out.slice(0, b, 1).reshape({T, d}));
  if (taps.layer == 0) massive_sums_.back() += double(B);
}

void ModelProbe::reduce(const std::function<void(double*, size_t)>& allreduce_sum) {
  allreduce_sum(sink_.state().data(), sink_.state().size());
  allreduce_sum(massive_sums_.data(), massive_sums_.size());
}

ProbeResult ModelProbe::result() const {
  ProbeResult r;
  const int L = sink_.n_layers(), H = sink_.n_heads(), K = sink_.K();
  r.samples = sink_.samples();
  std::vector<double> mean = sink_.mean_alpha();  // [L,H,K]
  r.alpha_k = mean;
  r.alpha.resize(size_t(L) * H);
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) r.alpha[size_t(l) * H + h] = float(mean[(size_t(l) * H + h) * K]);
  r.sink = sink_.sinks(0);
  const double n = massive_sums_.back();
  for (int l = 0; l < L; ++l) r.massive_ratio.push_back(float(n > 0 ? massive_sums_[size_t(l)] / n : 0.0));
  return r;
}

}  // namespace sinklab::probe
