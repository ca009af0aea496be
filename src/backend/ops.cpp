// ops:: entry points: forward each call to the backend of its tensors' device (backend.hpp).
// SINKLAB_PROFILE=1 in the environment times every op (host wall clock, so a device backend's ops
// are timed after a synchronize) and prints the totals per op at exit.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"

namespace sinklab {
namespace {

class OpProfile {
 public:
  static OpProfile& get() {
    static OpProfile profile;
    return profile;
  }
  bool enabled() const { return enabled_; }
  void add(const char* op, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& e = totals_[op];
    e.first += 1;
    e.second += seconds;
  }
  ~OpProfile() {
    if (!enabled_ || totals_.empty()) return;
    std::vector<std::pair<std::string, std::pair<long, double>>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    double total = 0;
    for (const auto& r : rows) total += r.second.second;
    std::fprintf(stderr, "sinklab op profile (SINKLAB_PROFILE): %.3f s in ops\n", total);
    for (const auto& r : rows)
      std::fprintf(stderr, "  %-22s %8ld calls %10.3f s %6.1f%%\n", r.first.c_str(), r.second.first, r.second.second,
                   100.0 * r.second.second / total);
  }

 private:
  OpProfile() : enabled_(std::getenv("SINKLAB_PROFILE") != nullptr) {}
  bool enabled_;
  std::mutex mutex_;
  std::map<std::string, std::pair<long, double>> totals_;
};

// Times one op call when profiling is on.
class OpTimer {
 public:
  OpTimer(const char* op, Backend& backend) : op_(op), backend_(backend) {
    if (OpProfile::get().enabled()) start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (!OpProfile::get().enabled()) return;
    backend_.synchronize();
    OpProfile::get().add(op_, std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
  }

 private:
  const char* op_;
  Backend& backend_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace
}  // namespace sinklab

namespace sinklab {

void Backend::fill(Tensor, double) { no_kernel("fill"); }
void Backend::copy(Tensor, Tensor) { no_kernel("copy"); }
void Backend::add(Tensor, Tensor, Tensor) { no_kernel("add"); }
void Backend::accumulate(Tensor, Tensor, double) { no_kernel("accumulate"); }
void Backend::scale(Tensor, double) { no_kernel("scale"); }
double Backend::sum_squares(Tensor) { no_kernel("sum_squares"); }
double Backend::max_abs(Tensor) { no_kernel("max_abs"); }
void Backend::column_sum(Tensor, Tensor, bool) { no_kernel("column_sum"); }
void Backend::fill_normal(Tensor, uint64_t, uint64_t, double, double) { no_kernel("fill_normal"); }
void Backend::fill_uniform(Tensor, uint64_t, uint64_t, double, double) { no_kernel("fill_uniform"); }
void Backend::linear_forward(Tensor, Tensor, Tensor, Tensor) { no_kernel("linear_forward"); }
void Backend::linear_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) { no_kernel("linear_backward"); }
void Backend::matmul(Tensor, Tensor, Tensor, bool, bool, double, double) { no_kernel("matmul"); }
void Backend::embedding_forward(Tensor, Tensor, Tensor) { no_kernel("embedding_forward"); }
void Backend::embedding_backward(Tensor, Tensor, Tensor) { no_kernel("embedding_backward"); }
void Backend::rmsnorm_forward(Tensor, Tensor, Tensor, Tensor, double) { no_kernel("rmsnorm_forward"); }
void Backend::rmsnorm_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) { no_kernel("rmsnorm_backward"); }
void Backend::layernorm_forward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, double) { no_kernel("layernorm_forward"); }
void Backend::layernorm_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) { no_kernel("layernorm_backward"); }
void Backend::rope_forward(Tensor, Tensor, Tensor, const RopeConfig&) { no_kernel("rope_forward"); }
void Backend::rope_backward(Tensor, Tensor, Tensor, const RopeConfig&) { no_kernel("rope_backward"); }
void Backend::activation_forward(Tensor, Tensor, Activation) { no_kernel("activation_forward"); }
void Backend::activation_backward(Tensor, Tensor, Tensor, Activation) { no_kernel("activation_backward"); }
void Backend::gated_forward(Tensor, Tensor, Tensor, Activation) { no_kernel("gated_forward"); }
void Backend::gated_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Activation) { no_kernel("gated_backward"); }
void Backend::cross_entropy(Tensor, Tensor, Tensor, Tensor, int, double) { no_kernel("cross_entropy"); }
void Backend::adamw_update(Tensor, Tensor, Tensor, Tensor, const AdamWStep&) { no_kernel("adamw_update"); }
void Backend::attention_forward(Tensor, Tensor, Tensor, Tensor, Tensor, const AttentionSpec&, Tensor) {
  no_kernel("attention_forward");
}
void Backend::attention_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, const AttentionSpec&) { no_kernel("attention_backward"); }
void Backend::attention_probs(Tensor, Tensor, Tensor, const AttentionSpec&) { no_kernel("attention_probs"); }
void Backend::causal_conv1d_forward(Tensor, Tensor, Tensor, Tensor) { no_kernel("causal_conv1d_forward"); }
void Backend::selective_scan_forward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, bool) { no_kernel("selective_scan_forward"); }
void Backend::moe_router_topk(Tensor, Tensor, Tensor) { no_kernel("moe_router_topk"); }
void Backend::index_add_rows(Tensor, Tensor, Tensor, Tensor) { no_kernel("index_add_rows"); }

}  // namespace sinklab

namespace sinklab::ops {

void fill(Tensor out, double value) {
  Backend& backend = backend_for({out}, "fill");
  OpTimer timer("fill", backend);
  return backend.fill(out, value);
}

void copy(Tensor dst, Tensor src) {
  Backend& backend = backend_for({dst, src}, "copy");
  OpTimer timer("copy", backend);
  return backend.copy(dst, src);
}

void add(Tensor out, Tensor a, Tensor b) {
  Backend& backend = backend_for({out, a, b}, "add");
  OpTimer timer("add", backend);
  return backend.add(out, a, b);
}

void accumulate(Tensor dst, Tensor src, double alpha) {
  Backend& backend = backend_for({dst, src}, "accumulate");
  OpTimer timer("accumulate", backend);
  return backend.accumulate(dst, src, alpha);
}

void scale(Tensor x, double factor) {
  Backend& backend = backend_for({x}, "scale");
  OpTimer timer("scale", backend);
  return backend.scale(x, factor);
}

double sum_squares(Tensor x) {
  Backend& backend = backend_for({x}, "sum_squares");
  OpTimer timer("sum_squares", backend);
  return backend.sum_squares(x);
}

double max_abs(Tensor x) {
  Backend& backend = backend_for({x}, "max_abs");
  OpTimer timer("max_abs", backend);
  return backend.max_abs(x);
}

void column_sum(Tensor out, Tensor in, bool accumulate) {
  Backend& backend = backend_for({out, in}, "column_sum");
  OpTimer timer("column_sum", backend);
  return backend.column_sum(out, in, accumulate);
}

void fill_normal(Tensor out, uint64_t seed, uint64_t stream, double mean, double std) {
  Backend& backend = backend_for({out}, "fill_normal");
  OpTimer timer("fill_normal", backend);
  return backend.fill_normal(out, seed, stream, mean, std);
}

void fill_uniform(Tensor out, uint64_t seed, uint64_t stream, double low, double high) {
  Backend& backend = backend_for({out}, "fill_uniform");
  OpTimer timer("fill_uniform", backend);
  return backend.fill_uniform(out, seed, stream, low, high);
}

void linear_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) {
  Backend& backend = backend_for({out, in, weight, bias}, "linear_forward");
  OpTimer timer("linear_forward", backend);
  return backend.linear_forward(out, in, weight, bias);
}

void linear_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight) {
  Backend& backend = backend_for({d_in, d_weight, d_bias, d_out, in, weight}, "linear_backward");
  OpTimer timer("linear_backward", backend);
  return backend.linear_backward(d_in, d_weight, d_bias, d_out, in, weight);
}

void matmul(Tensor out, Tensor a, Tensor b, bool transpose_a, bool transpose_b, double alpha, double beta) {
  Backend& backend = backend_for({out, a, b}, "matmul");
  OpTimer timer("matmul", backend);
  return backend.matmul(out, a, b, transpose_a, transpose_b, alpha, beta);
}

void embedding_forward(Tensor out, Tensor ids, Tensor table) {
  Backend& backend = backend_for({out, ids, table}, "embedding_forward");
  OpTimer timer("embedding_forward", backend);
  return backend.embedding_forward(out, ids, table);
}

void embedding_backward(Tensor d_table, Tensor d_out, Tensor ids) {
  Backend& backend = backend_for({d_table, d_out, ids}, "embedding_backward");
  OpTimer timer("embedding_backward", backend);
  return backend.embedding_backward(d_table, d_out, ids);
}

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps) {
  Backend& backend = backend_for({out, rstd, in, weight}, "rmsnorm_forward");
  OpTimer timer("rmsnorm_forward", backend);
  return backend.rmsnorm_forward(out, rstd, in, weight, eps);
}

void rmsnorm_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight, Tensor rstd) {
  Backend& backend = backend_for({d_in, d_weight, d_out, in, weight, rstd}, "rmsnorm_backward");
  OpTimer timer("rmsnorm_backward", backend);
  return backend.rmsnorm_backward(d_in, d_weight, d_out, in, weight, rstd);
}

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias, double eps) {
  Backend& backend = backend_for({out, mean, rstd, in, weight, bias}, "layernorm_forward");
  OpTimer timer("layernorm_forward", backend);
  return backend.layernorm_forward(out, mean, rstd, in, weight, bias, eps);
}

void layernorm_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight, Tensor mean, Tensor rstd) {
  Backend& backend = backend_for({d_in, d_weight, d_bias, d_out, in, weight, mean, rstd}, "layernorm_backward");
  OpTimer timer("layernorm_backward", backend);
  return backend.layernorm_backward(d_in, d_weight, d_bias, d_out, in, weight, mean, rstd);
}

void rope_forward(Tensor out, Tensor x, Tensor positions, const RopeConfig& cfg) {
  Backend& backend = backend_for({out, x, positions}, "rope_forward");
  OpTimer timer("rope_forward", backend);
  return backend.rope_forward(out, x, positions, cfg);
}

void rope_backward(Tensor d_x, Tensor d_out, Tensor positions, const RopeConfig& cfg) {
  Backend& backend = backend_for({d_x, d_out, positions}, "rope_backward");
  OpTimer timer("rope_backward", backend);
  return backend.rope_backward(d_x, d_out, positions, cfg);
}

void activation_forward(Tensor out, Tensor in, Activation act) {
  Backend& backend = backend_for({out, in}, "activation_forward");
  OpTimer timer("activation_forward", backend);
  return backend.activation_forward(out, in, act);
}

void activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act) {
  Backend& backend = backend_for({d_in, d_out, in}, "activation_backward");
  OpTimer timer("activation_backward", backend);
  return backend.activation_backward(d_in, d_out, in, act);
}

void gated_forward(Tensor out, Tensor gate, Tensor up, Activation act) {
  Backend& backend = backend_for({out, gate, up}, "gated_forward");
  OpTimer timer("gated_forward", backend);
  return backend.gated_forward(out, gate, up, act);
}

void gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act) {
  Backend& backend = backend_for({d_gate, d_up, d_out, gate, up}, "gated_backward");
  OpTimer timer("gated_backward", backend);
  return backend.gated_backward(d_gate, d_up, d_out, gate, up, act);
}

void cross_entropy(Tensor losses, Tensor d_logits, Tensor logits, Tensor targets, int ignore_index, double grad_scale) {
  Backend& backend = backend_for({losses, d_logits, logits, targets}, "cross_entropy");
  OpTimer timer("cross_entropy", backend);
  return backend.cross_entropy(losses, d_logits, logits, targets, ignore_index, grad_scale);
}

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) {
  Backend& backend = backend_for({param, grad, m, v}, "adamw_update");
  OpTimer timer("adamw_update", backend);
  return backend.adamw_update(param, grad, m, v, s);
}

void attention_forward(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec,
                       Tensor probs) {
  Backend& backend = backend_for({out, stats, q, k, v, probs}, "attention_forward");
  OpTimer timer("attention_forward", backend);
  return backend.attention_forward(out, stats, q, k, v, spec, probs);
}

void attention_backward(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor stats, const AttentionSpec& spec) {
  Backend& backend = backend_for({d_q, d_k, d_v, d_out, q, k, v, out, stats}, "attention_backward");
  OpTimer timer("attention_backward", backend);
  return backend.attention_backward(d_q, d_k, d_v, d_out, q, k, v, out, stats, spec);
}

void attention_probs(Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec) {
  Backend& backend = backend_for({probs, q, k}, "attention_probs");
  OpTimer timer("attention_probs", backend);
  return backend.attention_probs(probs, q, k, spec);
}

double global_norm(std::span<const Tensor> grads) {
  double total = 0.0;
  for (const Tensor& g : grads) total += sum_squares(g);
  return std::sqrt(total);
}

double clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  double norm = global_norm(grads);
  if (norm > max_norm) {
    double coef = max_norm / (norm + 1e-6);
    for (const Tensor& g : grads) scale(g, coef);
  }
  return norm;
}

// ---- State-space (Mamba) layers and mixture-of-experts routing ----

void causal_conv1d_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) {
  Backend& backend = backend_for({out, in, weight, bias}, "causal_conv1d_forward");
  OpTimer timer("causal_conv1d_forward", backend);
  return backend.causal_conv1d_forward(out, in, weight, bias);
}

void selective_scan_forward(Tensor y, Tensor x, Tensor dt, Tensor A_log, Tensor B, Tensor C, Tensor D, Tensor dt_bias,
                            bool dt_softplus) {
  Backend& backend = backend_for({y, x, dt, A_log, B, C, D, dt_bias}, "selective_scan_forward");
  OpTimer timer("selective_scan_forward", backend);
  return backend.selective_scan_forward(y, x, dt, A_log, B, C, D, dt_bias, dt_softplus);
}

void moe_router_topk(Tensor top_weights, Tensor top_experts, Tensor logits) {
  Backend& backend = backend_for({top_weights, top_experts, logits}, "moe_router_topk");
  OpTimer timer("moe_router_topk", backend);
  return backend.moe_router_topk(top_weights, top_experts, logits);
}

void index_add_rows(Tensor out, Tensor src, Tensor index, Tensor scale) {
  Backend& backend = backend_for({out, src, index, scale}, "index_add_rows");
  OpTimer timer("index_add_rows", backend);
  return backend.index_add_rows(out, src, index, scale);
}

}  // namespace sinklab::ops
