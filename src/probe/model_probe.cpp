#include "probe/model_probe.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace sinklab::probe {

ModelProbe::ModelProbe(int n_layers, int n_heads, int64_t seq_len, int max_k, std::vector<double> eps, ProbeMask mask)
    : sink_(n_layers, n_heads, max_k, eps),
      sink_star_(n_layers, n_heads, 1, eps),
      mask_(mask),
      massive_sums_(size_t(n_layers) + 1, 0.0),
      pre_norm_sums_(size_t(n_layers), 0.0),
      seq_len_(seq_len) {
  if (mask.window > 0 && mask.window <= seq_len)
    window_.emplace(n_layers, n_heads, int(std::min<int64_t>(max_k, mask.window)), eps);
  if (mask.prefix > 1) positions_.emplace(n_layers, n_heads, int(seq_len), eps);
}


Tensor ModelProbe::probs_output(int, const std::array<int64_t, 4>& shape, DType dtype, Device device) {
  if (dtype != DType::f32 || !device.is_cpu()) return Tensor{};
  const size_t bytes = size_t(shape[0] * shape[1] * shape[2] * shape[3]) * sizeof(float);
  if (probs_buffer_.bytes() < bytes) probs_buffer_ = Buffer(bytes, Device::cpu());
  return probs_buffer_.view(DType::f32, {shape[0], shape[1], shape[2], shape[3]});
}

void ModelProbe::on_layer(const LayerTaps& taps) {
  const int64_t lead = taps.lead_positions, text = seq_len_;
  const int64_t B = taps.q.shape[0], Tm = taps.q.shape[1], H = taps.q.shape[2], d = taps.hidden_out.shape[2];
  SL_CHECK(Tm == text + lead, "probe built for T=%lld, got sequences of %lld tokens", (long long)text,
           (long long)(Tm - lead));
  SL_CHECK(taps.q.device.is_cpu(), "the sink probe needs CPU activations (device probing arrives with the CUDA issue)");
  const ops::AttentionSpec& spec = *taps.attention;
  const int64_t S = taps.k.shape[1], bias_cols = spec.lead_keys + lead;
  Tensor probs = taps.probs;
  if (!probs.defined()) {
    probs = probs_output(taps.layer, {B, H, Tm, S}, DType::f32, Device::cpu());
    ops::attention_probs(probs, taps.q, taps.k, spec);
  }
  SL_CHECK(probs.dtype == DType::f32 && probs.is_contiguous(), "the sink probe needs an f32 contiguous attention matrix");
  if (measured_by_proxy(spec)) {
    proxy_scores(probs, probs, proxy_takes_abs(spec));
    proxy_ = true;
  }
  // The text block: rows and key columns of x_1..x_T.
  Tensor text_probs = probs.slice(2, lead, text).slice(3, bias_cols, text);
  if (bias_cols > 0) {
    // alpha_* = mean over the text rows of the attention to the bias position(s).
    std::vector<double> alpha_star(size_t(B * H), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        double sum = 0.0;
        for (int64_t i = lead; i < Tm; ++i)
          for (int64_t c = 0; c < bias_cols; ++c) sum += probs.ptr<float>()[((b * H + h) * Tm + i) * S + c];
        alpha_star[size_t(b * H + h)] = sum / double(text);
      }
    sink_star_.add_alpha(taps.layer, Tensor(alpha_star.data(), DType::f64, {B, H, 1}));
    has_star_ = true;
  }
  sink_.add(taps.layer, text_probs);
  // Mask-relative metrics in text coordinates: a window never comes with lead positions (ModelConfig
  // refuses a sink token with a window) and a prefix of p text tokens is p text columns.
  if (window_) window_->add_window(taps.layer, text_probs, mask_.window);
  if (positions_) positions_->add_prefix(taps.layer, text_probs, mask_.prefix);
  for (int64_t b = 0; b < B; ++b) {
    massive_sums_[size_t(taps.layer)] += massive_ratio(taps.hidden_out.slice(0, b, 1).reshape({Tm, d}));
    if (taps.hidden_pre_norm.defined())
      pre_norm_sums_[size_t(taps.layer)] += massive_ratio(taps.hidden_pre_norm.slice(0, b, 1).reshape({Tm, d}));
  }
  has_pre_norm_ = has_pre_norm_ || taps.hidden_pre_norm.defined();
  if (taps.layer == 0) massive_sums_.back() += double(B);
}

void ModelProbe::reduce(const std::function<void(double*, size_t)>& allreduce_sum) {
  allreduce_sum(sink_.state().data(), sink_.state().size());
  allreduce_sum(sink_star_.state().data(), sink_star_.state().size());
  if (window_) allreduce_sum(window_->state().data(), window_->state().size());
  if (positions_) allreduce_sum(positions_->state().data(), positions_->state().size());
  allreduce_sum(massive_sums_.data(), massive_sums_.size());
  allreduce_sum(pre_norm_sums_.data(), pre_norm_sums_.size());
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
  for (int p = 0; p < K; ++p)
    for (double s : sink_.sinks(p)) r.sink_k.push_back(s);
  if (window_) {
    r.alpha_k_window = window_->mean_alpha();
    for (int p = 0; p < window_->K(); ++p)
      for (double s : window_->sinks(p)) r.sink_k_window.push_back(s);
  }
  if (positions_) {
    r.alpha_pos = positions_->mean_alpha();
    for (int p = 0; p < positions_->K(); ++p)
      for (double s : positions_->sinks(p)) r.sink_pos.push_back(s);
  }
  const double n = massive_sums_.back();
  for (int l = 0; l < L; ++l) r.massive_ratio.push_back(float(n > 0 ? massive_sums_[size_t(l)] / n : 0.0));
  if (has_pre_norm_)
    for (int l = 0; l < L; ++l) r.massive_ratio_pre_norm.push_back(float(n > 0 ? pre_norm_sums_[size_t(l)] / n : 0.0));
  r.proxy_scores = proxy_;
  if (has_star_) {
    r.sink_star = sink_star_.sinks(0);
    for (double a : sink_star_.mean_alpha()) r.alpha_star.push_back(float(a));
  }
  return r;
}

}  // namespace sinklab::probe
