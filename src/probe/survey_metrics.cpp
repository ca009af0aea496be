#include "probe/survey_metrics.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.hpp"
#include "core/text.hpp"

namespace sinklab::probe {
namespace {

bool parse_int(const std::string& s, int* out) {
  const char* end = s.data() + s.size();
  auto [p, ec] = std::from_chars(s.data(), end, *out);
  return ec == std::errc() && p == end && !s.empty();
}

void check_host_float(const Tensor& t, const char* what) {
  SL_CHECK(t.defined(), "survey probe: %s is undefined", what);
  SL_CHECK(t.device.is_cpu(), "survey probe: %s must be on the host (got %s)", what, t.device.name().c_str());
  SL_CHECK(t.dtype == DType::f32 || t.dtype == DType::f64, "survey probe: %s must be f32 or f64 (got %s)", what,
           dtype_name(t.dtype));
}

inline double at(const Tensor& t, int64_t offset) { return load_as_double(t.data, t.dtype, offset); }

// Work (elements read) below which the per-sequence / per-head loops stay on one thread.
constexpr int64_t kParallelMinWork = int64_t(1) << 15;

}  // namespace

std::vector<HeadPair> parse_head_pairs(const std::string& text, const char* flag) {
  std::vector<HeadPair> pairs;
  for (const std::string& item : split_commas(text)) {
    const size_t colon = item.find(':');
    HeadPair p;
    SL_CHECK(colon != std::string::npos && parse_int(item.substr(0, colon), &p.layer) &&
                 parse_int(item.substr(colon + 1), &p.head) && p.head >= 0,
             "--%s: '%s' is not layer:head (0-based; a negative layer counts from the end)", flag, item.c_str());
    pairs.push_back(p);
  }
  return pairs;
}

std::vector<HeadPair> resolve_head_pairs(const std::vector<HeadPair>& pairs, int n_layers,
                                         const std::vector<int>& attention_layers, int n_heads,
                                         std::vector<std::string>* skipped) {
  std::vector<HeadPair> out;
  for (const HeadPair& p : pairs) {
    const int layer = p.layer < 0 ? n_layers + p.layer : p.layer;
    std::string why;
    if (layer < 0 || layer >= n_layers)
      why = strfmt("the model has %d layers", n_layers);
    else if (std::find(attention_layers.begin(), attention_layers.end(), layer) == attention_layers.end())
      why = strfmt("layer %d has no attention", layer);
    else if (p.head >= n_heads)
      why = strfmt("the model has %d heads", n_heads);
    if (why.empty()) {
      out.push_back({layer, p.head});
    } else if (skipped) {
      skipped->push_back(strfmt("%d:%d (%s)", p.layer, p.head, why.c_str()));
    }
  }
  return out;
}

double next_token_loss_sum(Tensor logits, Tensor ids) {
  SL_CHECK(logits.ndim == 3, "next-token loss: logits must be [B,T,V], got %s", logits.shape_str().c_str());
  const int64_t B = logits.shape[0], T = logits.shape[1];
  double sum = 0.0;  // every position after the first is predicted once
  for (double loglik : continuation_logliks(logits, ids, std::vector<int64_t>(size_t(B), 1), std::vector<int64_t>(size_t(B), T)))
    sum -= loglik;
  return sum;
}

std::vector<double> continuation_logliks(Tensor logits, Tensor ids, const std::vector<int64_t>& start,
                                         const std::vector<int64_t>& end) {
  check_host_float(logits, "logits");
  SL_CHECK(logits.ndim == 3 && logits.is_contiguous(), "next-token log-likelihood: logits must be contiguous [B,T,V], got %s",
           logits.shape_str().c_str());
  const int64_t B = logits.shape[0], T = logits.shape[1], V = logits.shape[2], N = B * T;
  SL_CHECK(ids.dtype == DType::i32 && ids.device.is_cpu() && ids.is_contiguous() && ids.ndim == 2 &&
               ids.shape[0] == B && ids.shape[1] == T,
           "next-token log-likelihood: ids must be contiguous host i32 [%lld,%lld], got %s %s", (long long)B, (long long)T,
           dtype_name(ids.dtype), ids.shape_str().c_str());
  SL_CHECK(int64_t(start.size()) == B && int64_t(end.size()) == B, "next-token log-likelihood: one start and end per sequence");
  // Position t-1 predicts token t: targets[b, t-1] = ids[b, t] for t in [start_b, end_b), ignored (-1) elsewhere.
  Buffer targets_buffer = Buffer::for_tensor(DType::i32, {N});
  Buffer losses_buffer = Buffer::for_tensor(logits.dtype, {N});
  Tensor targets = targets_buffer.view(DType::i32, {N}), losses = losses_buffer.view(logits.dtype, {N});
  const int32_t* id = ids.ptr<int32_t>();
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = start[size_t(b)], e = end[size_t(b)];
    SL_CHECK(s >= 1 && s <= e && e <= T, "next-token log-likelihood: sequence %lld's span [%lld, %lld) is not inside "
             "[1, %lld]", (long long)b, (long long)s, (long long)e, (long long)T);
    for (int64_t t = 1; t <= T; ++t) targets.ptr<int32_t>()[b * T + t - 1] = t >= s && t < e ? id[b * T + t] : -1;
  }
  ops::cross_entropy(losses, Tensor{}, logits.reshape({N, V}), targets, -1, 0.0);
  std::vector<double> loglik(size_t(B), 0.0);  // ignored rows hold 0
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) loglik[size_t(b)] -= at(losses, b * T + t);
  return loglik;
}

SurveyProbe::SurveyProbe(SurveyShape shape, std::vector<HeadPair> qk_maps, std::vector<HeadPair> attention_maps)
    : shape_(std::move(shape)),
      qk_pairs_(std::move(qk_maps)),
      attention_pairs_(std::move(attention_maps)),
      sink_(int(shape_.attention_layers.size()), std::max(shape_.n_heads, 1), std::max(shape_.max_k, 1), shape_.eps) {
  const SurveyShape& s = shape_;
  SL_CHECK(s.n_layers >= 1 && !s.attention_layers.empty(), "survey probe: a model needs layers and at least one with attention");
  for (size_t i = 0; i < s.attention_layers.size(); ++i)
    SL_CHECK(s.attention_layers[i] >= 0 && s.attention_layers[i] < s.n_layers &&
                 (i == 0 || s.attention_layers[i] > s.attention_layers[i - 1]),
             "survey probe: attention layers must be ascending indices below %d", s.n_layers);
  SL_CHECK(s.n_heads >= 1 && s.n_kv_heads >= 1 && s.n_heads % s.n_kv_heads == 0,
           "survey probe: %d query heads are not a multiple of %d key/value heads", s.n_heads, s.n_kv_heads);
  SL_CHECK(s.seq_len >= 2, "survey probe: sequences need at least 2 tokens (T = %lld)", (long long)s.seq_len);
  SL_CHECK(s.max_k >= 1 && s.max_k <= s.seq_len, "survey probe: K = %d outside [1, T = %lld]", s.max_k,
           (long long)s.seq_len);
  for (const auto* pairs : {&qk_pairs_, &attention_pairs_})
    for (const HeadPair& p : *pairs)
      SL_CHECK(attention_index(p.layer) >= 0 && p.head >= 0 && p.head < s.n_heads,
               "survey probe: (layer %d, head %d) is not an attention head of the model", p.layer, p.head);
  const size_t L = size_t(s.n_layers), La = s.attention_layers.size(), H = size_t(s.n_heads);
  const size_t TT = size_t(s.seq_len * s.seq_len);
  for (auto* v : {&hnorm_first_, &hnorm_rest_, &massive_, &layer_samples_, &pre_first_, &pre_rest_, &pre_massive_})
    v->assign(L, 0.0);
  for (auto* v : {&knorm_first_, &knorm_rest_, &vnorm_first_, &vnorm_rest_}) v->assign(La, 0.0);
  last_to_first_.assign(La * H, 0.0);
  qk_cos_.assign(qk_pairs_.size() * TT, 0.0);
  qk_normprod_.assign(qk_pairs_.size() * TT, 0.0);
  attention_maps_.assign(attention_pairs_.size() * TT, 0.0);
}

int SurveyProbe::attention_index(int layer) const {
  const auto& a = shape_.attention_layers;
  auto it = std::lower_bound(a.begin(), a.end(), layer);
  return it != a.end() && *it == layer ? int(it - a.begin()) : -1;
}

void SurveyProbe::on_layer(const LayerTaps& taps) {
  const int l = taps.layer;
  const int64_t T = shape_.seq_len;
  SL_CHECK(l >= 0 && l < shape_.n_layers, "survey probe: layer %d reported by a model of %d layers", l, shape_.n_layers);
  SL_CHECK(taps.lead_positions == 0 && (taps.attention == nullptr || taps.attention->lead_keys == 0),
           "survey probe: layer %d has lead positions or keys (a sink token, k*/v* biases); sinklab-probe "
           "measures such models", l);
  // Each sequence's norms in parallel, then summed in sequence order (the same for any thread count).
  auto add_norms = [&](const Tensor& r, const char* what, std::vector<double>& first, std::vector<double>& rest,
                       std::vector<double>& massive) {
    check_host_float(r, what);
    SL_CHECK(r.ndim == 3 && r.shape[1] == T, "survey probe: %s %s, expected [B,%lld,d]", what, r.shape_str().c_str(),
             (long long)T);
    const int64_t B = r.shape[0];
    std::vector<FirstVsRest> n(static_cast<size_t>(B));
#pragma omp parallel for schedule(static) if (B > 1 && r.numel() >= kParallelMinWork)
    for (int64_t b = 0; b < B; ++b) n[size_t(b)] = first_vs_rest_norms(r.select(b));
    for (int64_t b = 0; b < B; ++b) {
      SL_CHECK(n[size_t(b)].rest > 0.0, "survey probe: layer %d: %s rows 1..T-1 of sequence %lld are all zero", l,
               what, (long long)b);
      first[size_t(l)] += n[size_t(b)].first;
      rest[size_t(l)] += n[size_t(b)].rest;
      massive[size_t(l)] += n[size_t(b)].first / n[size_t(b)].rest;  // massive_ratio
    }
  };
  add_norms(taps.hidden_out, "hidden_out", hnorm_first_, hnorm_rest_, massive_);
  if (taps.hidden_pre_norm.defined()) {
    add_norms(taps.hidden_pre_norm, "hidden_pre_norm", pre_first_, pre_rest_, pre_massive_);
    has_pre_norm_ = true;
  }
  layer_samples_[size_t(l)] += double(taps.hidden_out.shape[0]);
  const int a = attention_index(l);
  if (a >= 0) {
    SL_CHECK(taps.attention != nullptr && taps.q.defined() && taps.k.defined() && taps.v.defined(),
             "survey probe: layer %d should have attention but reports no q/k/v", l);
    add_attention(a, taps);
  } else {
    SL_CHECK(taps.attention == nullptr, "survey probe: layer %d reports attention, which the model info does not list", l);
  }
}

Tensor SurveyProbe::probs_output(int, const std::array<int64_t, 4>& shape, DType dtype, Device device) {
  if ((dtype != DType::f32 && dtype != DType::f64) || !device.is_cpu()) return Tensor{};
  const size_t bytes = size_t(shape[0] * shape[1] * shape[2] * shape[3]) * dtype_size(dtype);
  if (bytes > kFusedProbsMaxBytes) return Tensor{};
  fused_probs_buffer_.ensure(bytes, Device::cpu());
  return fused_probs_buffer_.view(dtype, {shape[0], shape[1], shape[2], shape[3]});
}

void SurveyProbe::add_attention(int a, const LayerTaps& taps) {
  const Tensor &q = taps.q, &k = taps.k, &v = taps.v;
  for (const auto& [t, name] : {std::pair{&q, "q"}, std::pair{&k, "k"}, std::pair{&v, "v"}}) check_host_float(*t, name);
  const int64_t B = q.shape[0], T = shape_.seq_len, H = shape_.n_heads, Hkv = shape_.n_kv_heads;
  const int K = shape_.max_k;
  SL_CHECK(q.ndim == 4 && q.shape[1] == T && q.shape[2] == H, "survey probe: layer %d: q %s, expected [B,%lld,%lld,dh]",
           taps.layer, q.shape_str().c_str(), (long long)T, (long long)H);
  SL_CHECK(k.ndim == 4 && k.shape[0] == B && k.shape[1] >= T && k.shape[2] == Hkv,
           "survey probe: layer %d: k %s, expected [%lld,S>=%lld,%lld,dh]", taps.layer, k.shape_str().c_str(),
           (long long)B, (long long)T, (long long)Hkv);
  const int64_t S = k.shape[1], group = H / Hkv;

  std::vector<FirstVsRest> kn(static_cast<size_t>(B)), vn(static_cast<size_t>(B));
#pragma omp parallel for schedule(static) if (B > 1 && 2 * k.numel() >= kParallelMinWork)
  for (int64_t b = 0; b < B; ++b) {
    kn[size_t(b)] = first_vs_rest_norms(k.select(b));
    vn[size_t(b)] = first_vs_rest_norms(v.select(b));
  }
  for (int64_t b = 0; b < B; ++b) {
    knorm_first_[size_t(a)] += kn[size_t(b)].first;
    knorm_rest_[size_t(a)] += kn[size_t(b)].rest;
    vnorm_first_[size_t(a)] += vn[size_t(b)].first;
    vnorm_rest_[size_t(a)] += vn[size_t(b)].rest;
  }

  // The matrix the attention op formed (taps.probs, all heads), or one head at a time formed here.
  const bool fused = taps.probs.defined();
  if (fused)
    SL_CHECK(taps.probs.ndim == 4 && taps.probs.shape[0] == B && taps.probs.shape[1] == H && taps.probs.shape[2] == T &&
                 taps.probs.shape[3] == S,
             "survey probe: layer %d: attention matrix %s, expected [%lld,%lld,%lld,%lld]", taps.layer,
             taps.probs.shape_str().c_str(), (long long)B, (long long)H, (long long)T, (long long)S);
  if (!fused) probs_buffer_.ensure(size_t(B * T * S) * dtype_size(q.dtype), Device::cpu());
  alpha_buffer_.ensure(size_t(B * H * K) * sizeof(double), Device::cpu());
  Tensor alpha = alpha_buffer_.view(DType::f64, {B, H, K});
  std::vector<double> last_to_first(size_t(B * H));
  const bool proxy = measured_by_proxy(*taps.attention);
  const bool signed_kernel = proxy_takes_abs(*taps.attention);
  const size_t TT = size_t(T * T);
  // Heads h0 .. h0+Hn-1 of probs [B,Hn,T,S]: proxy scores where the rows are not a distribution, alpha
  // and A[T-1,0] of every (sequence, head) in parallel (each lands in its own slot), then the maps.
  auto measure_heads = [&](const Tensor& probs, int64_t h0) {
    const int64_t Hn = probs.shape[1];
#pragma omp parallel for collapse(2) schedule(static) if (B * Hn > 1 && probs.numel() >= kParallelMinWork)
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hn = 0; hn < Hn; ++hn) {
        const Tensor A = probs.slice(0, b, 1).slice(1, hn, 1).reshape({T, S});
        if (proxy) proxy_scores(A, A, signed_kernel);
        importance_scores(A, K, alpha.ptr<double>() + (b * H + h0 + hn) * K);
        last_to_first[size_t(b * H + h0 + hn)] = at(A, (T - 1) * S);
      }
    for (size_t p = 0; p < attention_pairs_.size(); ++p) {
      const int64_t hn = attention_pairs_[p].head - h0;
      if (attention_pairs_[p].layer != taps.layer || hn < 0 || hn >= Hn) continue;
      double* map = attention_maps_.data() + p * TT;
      for (int64_t b = 0; b < B; ++b) {
        const Tensor A = probs.slice(0, b, 1).slice(1, hn, 1).reshape({T, S});
        for (int64_t i = 0; i < T; ++i)
          for (int64_t j = 0; j < T; ++j) map[i * T + j] += at(A, i * S + j);
      }
    }
  };
  if (fused) {
    measure_heads(taps.probs, 0);
  } else {
    Tensor probs = probs_buffer_.view(q.dtype, {B, 1, T, S});
    for (int64_t h = 0; h < H; ++h) {
      ops::AttentionSpec spec = *taps.attention;
      if (spec.sink_logit.defined()) spec.sink_logit = spec.sink_logit.slice(0, h, 1);
      ops::attention_probs(probs, q.slice(2, h, 1), k.slice(2, h / group, 1), spec);
      measure_heads(probs, h);
    }
  }
  for (int64_t h = 0; h < H; ++h)
    for (int64_t b = 0; b < B; ++b) last_to_first_[size_t(a * H + h)] += last_to_first[size_t(b * H + h)];
  for (size_t p = 0; p < qk_pairs_.size(); ++p)
    if (qk_pairs_[p].layer == taps.layer) add_qk_map(p, taps, qk_pairs_[p].head);
  sink_.add_alpha(a, alpha);
}

void SurveyProbe::add_qk_map(size_t pair, const LayerTaps& taps, int head) {
  const Tensor &q = taps.q, &k = taps.k;
  const int64_t B = q.shape[0], T = shape_.seq_len, dh = q.shape[3];
  const int64_t g = head / (shape_.n_heads / shape_.n_kv_heads);
  SL_CHECK(k.shape[3] == dh, "survey probe: q and k head dims differ (%lld, %lld)", (long long)dh, (long long)k.shape[3]);
  double* cos_map = qk_cos_.data() + pair * size_t(T * T);
  double* norm_map = qk_normprod_.data() + pair * size_t(T * T);
  std::vector<double> qn(static_cast<size_t>(T)), kn(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b) {
    auto q_at = [&](int64_t t, int64_t e) { return at(q, b * q.stride[0] + t * q.stride[1] + head * q.stride[2] + e * q.stride[3]); };
    auto k_at = [&](int64_t j, int64_t e) { return at(k, b * k.stride[0] + j * k.stride[1] + g * k.stride[2] + e * k.stride[3]); };
    for (int64_t t = 0; t < T; ++t) {
      double sq = 0.0, sk = 0.0;
      for (int64_t e = 0; e < dh; ++e) {
        sq += q_at(t, e) * q_at(t, e);
        sk += k_at(t, e) * k_at(t, e);
      }
      qn[size_t(t)] = std::sqrt(sq);
      kn[size_t(t)] = std::sqrt(sk);
    }
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < T; ++j) {
        double dot = 0.0;
        for (int64_t e = 0; e < dh; ++e) dot += q_at(t, e) * k_at(j, e);
        const double np = qn[size_t(t)] * kn[size_t(j)];
        cos_map[t * T + j] += np > 0 ? dot / np : 0.0;  // a zero vector has no angle: counted as 0
        norm_map[t * T + j] += np;
      }
  }
}

SurveyResult SurveyProbe::result() const {
  SurveyResult r;
  r.samples = sink_.samples();
  SL_CHECK(r.samples > 0, "survey probe: no sequences were seen");
  for (int l = 0; l < shape_.n_layers; ++l)
    SL_CHECK(layer_samples_[size_t(l)] == double(r.samples),
             "survey probe: layer %d saw %.0f sequences, the attention layers %lld", l, layer_samples_[size_t(l)],
             (long long)r.samples);
  const double n = double(r.samples);
  auto mean = [n](const std::vector<double>& sums) {
    std::vector<double> out(sums.size());
    for (size_t i = 0; i < sums.size(); ++i) out[i] = sums[i] / n;
    return out;
  };
  auto mean_f32 = [n](const std::vector<double>& sums) {
    std::vector<float> out(sums.size());
    for (size_t i = 0; i < sums.size(); ++i) out[i] = float(sums[i] / n);
    return out;
  };
  r.alpha = sink_.mean_alpha();
  for (int p = 0; p < shape_.max_k; ++p)
    for (double s : sink_.sinks(p)) r.sink_k.push_back(s);
  r.hnorm_first = mean(hnorm_first_);
  r.hnorm_rest = mean(hnorm_rest_);
  r.massive_ratio = mean(massive_);
  if (has_pre_norm_) {
    r.hnorm_first_pre_norm = mean(pre_first_);
    r.hnorm_rest_pre_norm = mean(pre_rest_);
    r.massive_ratio_pre_norm = mean(pre_massive_);
  }
  r.knorm_first = mean(knorm_first_);
  r.knorm_rest = mean(knorm_rest_);
  r.vnorm_first = mean(vnorm_first_);
  r.vnorm_rest = mean(vnorm_rest_);
  r.last_to_first = mean(last_to_first_);
  r.qk_cos = mean_f32(qk_cos_);
  r.qk_normprod = mean_f32(qk_normprod_);
  r.attention_maps = mean_f32(attention_maps_);
  return r;
}

}  // namespace sinklab::probe
