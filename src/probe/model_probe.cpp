#include "probe/model_probe.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace sinklab::probe {

ModelProbe::ModelProbe(int n_layers, int n_heads, int64_t seq_len, int max_k, std::vector<double> eps, ProbeMask mask,
                       int n_query_groups)
    : sink_(n_layers, n_heads, max_k, eps),
      sink_star_(n_layers, n_heads, 1, eps),
      mask_(mask),
      massive_sums_(size_t(n_layers) + 1, 0.0),
      pre_norm_sums_(size_t(n_layers), 0.0),
      norm_sums_(4 * size_t(n_layers), 0.0),
      group_sums_(3 * size_t(n_layers) * size_t(n_heads) * size_t(n_query_groups), 0.0),
      group_counts_(2 * size_t(n_query_groups), 0.0),
      marked_sums_(size_t(n_layers) * size_t(n_heads) + 1, 0.0),
      sink_logit_sums_(size_t(n_layers) * size_t(n_heads) + 1, 0.0),
      n_groups_(n_query_groups),
      seq_len_(seq_len) {
  SL_CHECK(n_query_groups >= 1 && n_query_groups <= 127, "ModelProbe: %d query groups", n_query_groups);
  if (mask.window > 0 && mask.window <= seq_len)
    window_.emplace(n_layers, n_heads, int(std::min<int64_t>(max_k, mask.window)), eps);
  if (mask.prefix > 1) positions_.emplace(n_layers, n_heads, int(seq_len), eps);
}


Tensor ModelProbe::probs_output(int, const std::array<int64_t, 4>& shape, DType dtype, Device device) {
  if (dtype != DType::f32 || !device.is_cpu()) return Tensor{};
  const size_t bytes = size_t(shape[0] * shape[1] * shape[2] * shape[3]) * sizeof(float);
  probs_buffer_.ensure(bytes, Device::cpu());
  return probs_buffer_.view(DType::f32, {shape[0], shape[1], shape[2], shape[3]});
}

void ModelProbe::on_layer(const LayerTaps& taps) {
  const int64_t lead = taps.lead_positions, text = seq_len_;
  const int64_t B = taps.q.shape[0], Tm = taps.q.shape[1], H = taps.q.shape[2], d = taps.hidden_out.shape[2];
  SL_CHECK(Tm == text + lead, "probe built for T=%lld, got sequences of %lld tokens", (long long)text,
           (long long)(Tm - lead));
  SL_CHECK(taps.q.device.is_cpu(), "the sink probe reads host activations (a GPU model's taps go through probe::HostTaps)");
  const ops::AttentionSpec& spec = *taps.attention;
  const int64_t S = taps.k.shape[1], bias_cols = spec.lead_keys + lead;
  Tensor probs = taps.probs;
  if (!probs.defined()) {
    probs = probs_output(taps.layer, {B, H, Tm, S}, DType::f32, Device::cpu());
    ops::attention_probs(probs, taps.q, taps.k, spec);
  }
  SL_CHECK(probs.dtype == DType::f32 && probs.is_contiguous(), "the sink probe needs an f32 contiguous attention matrix");
  // The text block: rows and key columns of x_1..x_T.
  Tensor text_probs = probs.slice(2, lead, text).slice(3, bias_cols, text);
  add_first_token_attention(taps.layer, text_probs, /*raw=*/true);  // before proxy scores replace the weights
  if (spec.sink_logit.defined()) add_sink_logit_share(taps.layer, probs, lead);
  if (measured_by_proxy(spec)) {
    proxy_scores(probs, probs, proxy_takes_abs(spec));
    proxy_ = true;
  }
  add_first_token_attention(taps.layer, text_probs, /*raw=*/false);
  if (!marked_keys_.empty()) add_marked_attention(taps.layer, text_probs);
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
  const size_t L = massive_sums_.size() - 1, l = size_t(taps.layer);
  for (int64_t b = 0; b < B; ++b) {
    const FirstVsRest h = first_vs_rest_norms(taps.hidden_out.select(b));
    // The value vectors of the sequence's positions (after the lead keys k*/v*): all kv heads as one.
    const FirstVsRest v = first_vs_rest_norms(taps.v.select(b).slice(0, spec.lead_keys, S - spec.lead_keys));
    norm_sums_[l] += h.first;
    norm_sums_[L + l] += h.rest;
    norm_sums_[2 * L + l] += v.first;
    norm_sums_[3 * L + l] += v.rest;
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
  allreduce_sum(norm_sums_.data(), norm_sums_.size());
  allreduce_sum(group_sums_.data(), group_sums_.size());
  allreduce_sum(group_counts_.data(), group_counts_.size());
  allreduce_sum(marked_sums_.data(), marked_sums_.size());
  allreduce_sum(sink_logit_sums_.data(), sink_logit_sums_.size());
}

// The sink logit's share of each text row of probs [B,H,Tm,S] (the weights as computed: every key, the lead
// ones included, and the logit's e^{S_h} / Z_i make up 1), as a sum over sequences of the mean over rows.
void ModelProbe::add_sink_logit_share(int layer, const Tensor& probs, int64_t lead) {
  const int64_t B = probs.shape[0], H = probs.shape[1], Tm = probs.shape[2], S = probs.shape[3];
  const float* p = probs.ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      double share = 0.0;
      for (int64_t i = lead; i < Tm; ++i) {
        const float* row = p + ((b * H + h) * Tm + i) * S;
        double sum = 0.0;
        for (int64_t c = 0; c < S; ++c) sum += row[c];
        share += 1.0 - sum;
      }
      sink_logit_sums_[size_t(layer * H + h)] += share / double(Tm - lead);
    }
  if (layer == 0) sink_logit_sums_.back() += double(B);
  has_sink_logit_ = true;
}

void ModelProbe::add_marked_attention(int layer, const Tensor& probs) {
  const int64_t B = probs.shape[0], H = probs.shape[1], T = probs.shape[2];
  SL_CHECK(int64_t(marked_keys_.size()) == B * T, "ModelProbe: marked keys for %zu positions, but the forward pass "
           "has %lld x %lld", marked_keys_.size(), (long long)B, (long long)T);
  const float* p = probs.ptr<float>();
  for (int64_t b = 0; b < B; ++b) {
    const uint8_t* marked = marked_keys_.data() + b * T;
    for (int64_t i = 1; i < T; ++i) {
      bool sees = false;
      for (int64_t j = 1; j <= i && !sees; ++j) sees = marked[j] != 0;
      if (!sees) continue;
      if (layer == 0) marked_sums_.back() += 1.0;
      for (int64_t h = 0; h < H; ++h) {
        const float* row = p + b * probs.stride[0] + h * probs.stride[1] + i * probs.stride[2];
        double sum = 0.0;
        for (int64_t j = 1; j <= i; ++j)
          if (marked[j]) sum += row[j * probs.stride[3]];
        marked_sums_[size_t(layer * H + h)] += sum;
      }
    }
  }
}

// The group sums of the header comment from the text block probs [B,H,T,T] (strided): first_raw and
// rest_raw (raw: the weights as computed; the query counts with them, once per forward pass) or first
// (the weights as the sink metric reads them).
void ModelProbe::add_first_token_attention(int layer, const Tensor& probs, bool raw) {
  const int64_t B = probs.shape[0], H = probs.shape[1], T = probs.shape[2], G = n_groups_;
  SL_CHECK(query_groups_.empty() || int64_t(query_groups_.size()) == B * T,
           "ModelProbe: query groups for %zu positions, but the forward pass has %lld x %lld", query_groups_.size(),
           (long long)B, (long long)T);
  const int64_t LHG = int64_t(group_sums_.size()) / 3, base = int64_t(layer) * H * G;
  const float* p = probs.ptr<float>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < T; ++i) {
      const int g = query_groups_.empty() ? 0 : query_groups_[size_t(b * T + i)];
      if (g < 0) continue;
      SL_CHECK(g < G, "ModelProbe: query group %d of %lld", g, (long long)G);
      if (raw && layer == 0) {
        group_counts_[size_t(g)] += 1.0;
        if (i >= 1) group_counts_[size_t(G + g)] += 1.0;
      }
      for (int64_t h = 0; h < H; ++h) {
        const float* row = p + b * probs.stride[0] + h * probs.stride[1] + i * probs.stride[2];
        const size_t at = size_t(base + h * G + g);
        if (!raw) {
          group_sums_[at] += row[0];
          continue;
        }
        group_sums_[size_t(LHG) + at] += row[0];
        if (i == 0) continue;
        double others = 0.0;
        for (int64_t j = 1; j <= i; ++j) others += row[j * probs.stride[3]];
        group_sums_[size_t(2 * LHG) + at] += others / double(i);
      }
    }
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
  const double samples = massive_sums_.back();
  for (int part = 0; part < 4; ++part) {
    std::vector<double>& out = part == 0 ? r.hnorm_first : part == 1 ? r.hnorm_rest : part == 2 ? r.vnorm_first : r.vnorm_rest;
    for (int l = 0; l < L; ++l) out.push_back(samples > 0 ? norm_sums_[size_t(part * L + l)] / samples : 0.0);
  }
  r.n_query_groups = n_groups_;
  if (marked_sums_.back() > 0)
    for (size_t at = 0; at + 1 < marked_sums_.size(); ++at) r.marked_attention.push_back(marked_sums_[at] / marked_sums_.back());
  const size_t LHG = group_sums_.size() / 3;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  for (int part = 0; part < 3; ++part) {
    std::vector<double>& out = part == 0 ? r.first_attention : part == 1 ? r.first_weight_raw : r.rest_weight_raw;
    for (size_t at = 0; at < LHG; ++at) {
      const double n = group_counts_[(part == 2 ? size_t(n_groups_) : 0) + at % size_t(n_groups_)];
      out.push_back(n > 0 ? group_sums_[part * LHG + at] / n : nan);
    }
  }
  if (has_sink_logit_ && sink_logit_sums_.back() > 0)
    for (size_t at = 0; at + 1 < sink_logit_sums_.size(); ++at)
      r.sink_logit_share.push_back(sink_logit_sums_[at] / sink_logit_sums_.back());
  if (has_star_) {
    r.sink_star = sink_star_.sinks(0);
    for (double a : sink_star_.mean_alpha()) r.alpha_star.push_back(float(a));
  }
  return r;
}

}  // namespace sinklab::probe
