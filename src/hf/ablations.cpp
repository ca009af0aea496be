// The survey's ablations of what the sink does (hf_model.hpp: AttentionAblation, HiddenAblation), shared by
// every family: each family calls FamilyModel::attention where it would call ops::attention_forward, and
// FamilyModel::ablate_hidden on each block's output.
//
// window: the sliding-window mask of the attention op. mask_first: key 1 is masked by attending over the
// sequence without its first token (queries 2..T over keys 2..T, causally; positions were applied before,
// so the relative distances are the model's own) while query 1, which sees only itself, keeps its output
// v_1. window_sinks: attention over the union of two key sets, merged by their log-normalisers (the
// flash-decoding identity o = (Z_a o_a + Z_b o_b) / (Z_a + Z_b)):
//   recent  the window's keys, through the op with the model's own q (relative distances i - j); the op's
//           stats give log Z_recent,i
//   sinks   the first sink_tokens keys that are not in query i's window (t <= i - window), scored by hand
//           (at most a few keys a query) with the query re-rotated to its cache slot
//           p_i = min(i, sink_tokens + window - 1): q' = R(p_i - i) q, what rope_backward at positions
//           i - p_i gives.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "hf/family.hpp"

namespace sinklab::hf {
namespace {

// Softmax attention (scale * <q, k> with exp and sum) is what the window_sinks merge assumes: every
// pretrained family the survey reads has it.
void check_softmax(const ops::AttentionSpec& spec, const std::string& dir) {
  SL_CHECK(spec.sim == ops::AttnSim::exp && spec.norm == ops::AttnNorm::sum && spec.norm_alpha == 1.0 &&
               spec.lead_keys == 0 && spec.pos_bias == ops::AttnPosBias::none && !spec.sink_logit.defined(),
           "%s: the window_sinks ablation needs plain softmax attention", dir.c_str());
}

}  // namespace

void FamilyModel::attention(Tensor out, Tensor q, Tensor k, Tensor v, const ops::AttentionSpec& model_spec, int layer,
                            const ForwardOptions& opt, const ops::RopeConfig* rope, Tensor probs) {
  ops::AttentionSpec spec = model_spec;
  spec.kernel = info_.attention_kernel;  // (LoadOptions::attention_kernel: f32 reference unless asked)
  const AttentionAblation& a = opt.attention_ablation;
  using Kind = AttentionAblation::Kind;
  if (a.kind == Kind::none || (a.kind == Kind::mask_first && layer < a.from_layer)) {
    ops::attention_forward(out, Tensor{}, q, k, v, spec, probs);
    return;
  }
  SL_CHECK(!probs.defined(), "%s: an ablated attention is measured by its loss; the probe's attention matrix would "
           "not be the one the model used", info_.dir.c_str());
  const int64_t B = q.shape[0], T = q.shape[1], H = q.shape[2], dh = q.shape[3], Hkv = k.shape[2];
  if (a.kind == Kind::mask_first) {
    ops::attention_forward(out.slice(1, 0, 1), Tensor{}, q.slice(1, 0, 1), k.slice(1, 0, 1), v.slice(1, 0, 1), spec);
    if (T > 1)
      ops::attention_forward(out.slice(1, 1, T - 1), Tensor{}, q.slice(1, 1, T - 1), k.slice(1, 1, T - 1),
                             v.slice(1, 1, T - 1), spec);
    return;
  }
  // The window (intersected with a window the model has of its own, e.g. Mistral's).
  ops::AttentionSpec recent = spec;
  const int64_t own = spec.mask == ops::AttnMask::sliding_window ? spec.window : T;
  recent.mask = ops::AttnMask::sliding_window;
  recent.window = std::min(a.window, own);
  if (a.kind == Kind::window || a.sink_tokens == 0) {
    ops::attention_forward(out, Tensor{}, q, k, v, recent);
    return;
  }
  check_softmax(spec, info_.dir);
  SL_CHECK(q.dtype == DType::f32 && k.dtype == DType::f32 && v.dtype == DType::f32 && out.dtype == DType::f32,
           "%s: the window_sinks ablation runs on f32 tensors", info_.dir.c_str());
  const int64_t W = recent.window, s = a.sink_tokens, P = s + W - 1;
  const int64_t stats_n = B * H * T, q_n = B * T * H * dh;
  ablation_scratch_.ensure(size_t(stats_n + q_n + T) * sizeof(float), Device::cpu());
  float* scratch = static_cast<float*>(ablation_scratch_.ptr_at(0));
  // The op runs where the model does; the merge below runs on the host, on copies of a GPU model's
  // tensors (a few keys per query), and a GPU model gets the merged output copied back.
  const Device device = q.device;
  Tensor stats(scratch, DType::f32, {B, H, T});
  if (!device.is_cpu()) {
    ablation_device_.ensure(size_t(stats_n) * sizeof(float), device);
    stats = ablation_device_.view(DType::f32, {B, H, T});
  }
  ops::attention_forward(out, stats, q, k, v, recent);
  const Tensor device_out = out;
  stats = on_host(ablation_host_[0], stats);
  out = on_host(ablation_host_[1], out);
  q = on_host(ablation_host_[2], q);
  k = on_host(ablation_host_[3], k);
  v = on_host(ablation_host_[4], v);

  // The queries at their cache slots (rotary models only).
  Tensor q_slot = q;
  if (rope) {
    q_slot = Tensor(scratch + stats_n, DType::f32, {B, T, H, dh});
    Tensor back(scratch + stats_n + q_n, DType::i32, {T});
    for (int64_t i = 0; i < T; ++i) back.ptr<int32_t>()[i] = int32_t(i - std::min(i, P));
    ops::rope_backward(q_slot, q, back, *rope);
  }
  const double scale = spec.scale > 0 ? spec.scale : 1.0 / std::sqrt(double(dh));
  const int64_t group = H / Hkv;
  auto at = [](const Tensor& t, int64_t b, int64_t i, int64_t h, int64_t c) {
    return double(t.ptr<float>()[b * t.stride[0] + i * t.stride[1] + h * t.stride[2] + c * t.stride[3]]);
  };
#pragma omp parallel for collapse(2) schedule(static)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / group;
      std::vector<double> logits(static_cast<size_t>(s)), acc(static_cast<size_t>(dh));
      for (int64_t i = W; i < T; ++i) {  // queries with sinks outside their window: t <= i - W
        const int64_t n_sinks = std::min(s, i - W + 1);
        const double lse_recent = double(stats.ptr<float>()[(b * H + h) * T + i]);
        double m = lse_recent;
        for (int64_t t = 0; t < n_sinks; ++t) {
          double dot = 0;
          for (int64_t c = 0; c < dh; ++c) dot += at(q_slot, b, i, h, c) * at(k, b, t, hk, c);
          logits[size_t(t)] = scale * dot;
          m = std::max(m, logits[size_t(t)]);
        }
        const double w_recent = std::exp(lse_recent - m);
        double z = w_recent;
        for (int64_t c = 0; c < dh; ++c) acc[size_t(c)] = w_recent * at(out, b, i, h, c);
        for (int64_t t = 0; t < n_sinks; ++t) {
          const double w = std::exp(logits[size_t(t)] - m);
          z += w;
          for (int64_t c = 0; c < dh; ++c) acc[size_t(c)] += w * at(v, b, t, hk, c);
        }
        float* o = out.ptr<float>() + b * out.stride[0] + i * out.stride[1] + h * out.stride[2];
        for (int64_t c = 0; c < dh; ++c) o[c * out.stride[3]] = float(acc[size_t(c)] / z);
      }
    }
  if (!device.is_cpu()) ops::copy(device_out, out);
}

void FamilyModel::ablate_hidden(Tensor x, int64_t batch, int64_t seq, int layer, const ForwardOptions& opt) {
  const HiddenAblation& a = opt.hidden_ablation;
  if (a.kind == HiddenAblation::Kind::none || layer != a.layer) return;
  SL_CHECK(x.dtype == DType::f32 && x.is_contiguous() && x.ndim == 2 && x.shape[0] == batch * seq,
           "%s: the hidden-state ablation needs the f32 block output [B*T, d]", info_.dir.c_str());
  // On the host (a GPU model's block output copied down and back: one layer of one pass).
  const Tensor device_x = x;
  x = on_host(ablation_host_[5], x);
  const int64_t d = x.shape[1];
  for (int64_t b = 0; b < batch; ++b) {
    float* first = x.ptr<float>() + b * seq * d;
    // The top_dims features of h_1 by magnitude (ties: the lower index), this sequence's own.
    std::vector<int64_t> dims(static_cast<size_t>(d));
    for (int64_t c = 0; c < d; ++c) dims[size_t(c)] = c;
    std::stable_sort(dims.begin(), dims.end(), [&](int64_t p, int64_t r) { return std::fabs(first[p]) > std::fabs(first[r]); });
    for (int64_t r = 0; r < a.top_dims; ++r) {
      const int64_t c = dims[size_t(r)];
      double value = 0;
      if (a.kind == HiddenAblation::Kind::mean && seq > 1) {
        for (int64_t t = 1; t < seq; ++t) value += double(first[t * d + c]);
        value /= double(seq - 1);
      }
      first[c] = float(value);
    }
  }
  if (!device_x.device.is_cpu()) ops::copy(device_x, x);
}

}  // namespace sinklab::hf
