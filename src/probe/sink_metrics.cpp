#include "probe/sink_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include <omp.h>

#include "core/error.hpp"
#include "core/text.hpp"

namespace sinklab::probe {

std::vector<double> parse_sink_eps(const std::string& text) {
  std::vector<double> eps = parse_number_list(text, "sink-eps");
  SL_CHECK(!eps.empty(), "--sink-eps names no threshold");
  for (double e : eps) SL_CHECK(e > 0 && e < 1, "--sink-eps values must lie in (0, 1), got %g", e);
  return eps;
}
namespace {

void check_float_cpu(const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.defined(), "%s: %s is undefined", op, arg);
  SL_CHECK(t.device.is_cpu(), "%s: %s must be a CPU tensor (got %s)", op, arg, t.device.name().c_str());
  SL_CHECK(t.dtype == DType::f32 || t.dtype == DType::f64, "%s: %s must be f32 or f64 (got %s)", op, arg,
           dtype_name(t.dtype));
}

inline double load(const Tensor& t, int64_t off) {
  return t.dtype == DType::f64 ? t.ptr<double>()[off] : double(t.ptr<float>()[off]);
}

// Element offset of row r of t viewed as [rows, last] (row-major over the leading dims).
int64_t row_offset(const Tensor& t, int64_t r) {
  int64_t off = 0;
  for (int d = t.ndim - 2; d >= 0; --d) {
    off += (r % t.shape[d]) * t.stride[d];
    r /= t.shape[d];
  }
  return off;
}

// alpha of one head from a [T,S] matrix at base offset `base` with strides (si, sj). Row by row (each
// row's first K entries are adjacent when sj = 1); every column's sum still runs over i in ascending order.
template <typename F>
void alpha_of(const F* a, int64_t si, int64_t sj, int64_t T, int K, double* out) {
  std::fill(out, out + K, 0.0);
  for (int64_t i = 0; i < T; ++i) {
    const F* row = a + i * si;
    const int64_t n = std::min<int64_t>(K, i + 1);  // columns p <= i
    for (int64_t p = 0; p < n; ++p) out[p] += double(row[p * sj]);
  }
  for (int p = 0; p < K; ++p) out[p] /= double(T - p);
}
void alpha_of(const Tensor& t, int64_t base, int64_t si, int64_t sj, int64_t T, int K, double* out) {
  if (t.dtype == DType::f64) alpha_of(t.ptr<double>() + base, si, sj, T, K, out);
  else alpha_of(t.ptr<float>() + base, si, sj, T, K, out);
}

// alpha_k^win of one head (see window_importance_scores): the rows i >= w-1, each read from its window
// start; every offset's sum runs over i in ascending order.
template <typename F>
void window_alpha_of(const F* a, int64_t si, int64_t sj, int64_t T, int64_t w, int K, double* out) {
  std::fill(out, out + K, 0.0);
  for (int64_t i = w - 1; i < T; ++i) {
    const F* start = a + i * si + (i - w + 1) * sj;
    for (int k = 0; k < K; ++k) out[k] += double(start[k * sj]);
  }
  for (int k = 0; k < K; ++k) out[k] /= double(T - w + 1);
}
void window_alpha_of(const Tensor& t, int64_t base, int64_t si, int64_t sj, int64_t T, int64_t w, int K, double* out) {
  if (t.dtype == DType::f64) window_alpha_of(t.ptr<double>() + base, si, sj, T, w, K, out);
  else window_alpha_of(t.ptr<float>() + base, si, sj, T, w, K, out);
}

// Per-position alpha of one head (see prefix_importance_scores): column j over the rows that see it.
template <typename F>
void prefix_alpha_of(const F* a, int64_t si, int64_t sj, int64_t T, int64_t prefix, double* out) {
  std::fill(out, out + T, 0.0);
  for (int64_t i = 0; i < T; ++i) {
    const F* row = a + i * si;
    const int64_t seen = std::max(i + 1, std::min(prefix, T));  // keys 0..max(i, p-1)
    for (int64_t j = 0; j < seen; ++j) out[j] += double(row[j * sj]);
  }
  for (int64_t j = 0; j < T; ++j) out[j] /= double(j < prefix ? T : T - j);
}
void prefix_alpha_of(const Tensor& t, int64_t base, int64_t si, int64_t sj, int64_t T, int64_t prefix, double* out) {
  if (t.dtype == DType::f64) prefix_alpha_of(t.ptr<double>() + base, si, sj, T, prefix, out);
  else prefix_alpha_of(t.ptr<float>() + base, si, sj, T, prefix, out);
}

// sum_j x[j]^2 over n entries `stride` apart, accumulated in double (vectorised when adjacent).
template <typename F>
double sum_squares(const F* x, int64_t n, int64_t stride) {
  double s = 0.0;
  if (stride == 1) {
#pragma omp simd reduction(+ : s)
    for (int64_t j = 0; j < n; ++j) s += double(x[j]) * double(x[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) s += double(x[j * stride]) * double(x[j * stride]);
  }
  return s;
}

// l2 norm of row r of x [T,d] or [T,G,d] (a row of the latter is its G vectors concatenated).
template <typename F>
double row_norm(const Tensor& x, int64_t r) {
  const F* row = x.ptr<F>() + r * x.stride[0];
  if (x.ndim == 2) return std::sqrt(sum_squares(row, x.shape[1], x.stride[1]));
  double s = 0.0;
  for (int64_t g = 0; g < x.shape[1]; ++g) s += sum_squares(row + g * x.stride[1], x.shape[2], x.stride[2]);
  return std::sqrt(s);
}

// Work (elements read) below which a loop stays on one thread: a parallel region costs microseconds.
constexpr int64_t kParallelMinWork = int64_t(1) << 15;

}  // namespace

void importance_scores(const Tensor& attn, int K, double* out) {
  check_float_cpu(attn, "importance_scores", "attn");
  SL_CHECK(attn.ndim == 2, "importance_scores: attn must be [T,S], got %s", attn.shape_str().c_str());
  const int64_t T = attn.shape[0], S = attn.shape[1];
  SL_CHECK(T >= 1 && S >= T, "importance_scores: attn %s needs S >= T >= 1", attn.shape_str().c_str());
  SL_CHECK(K >= 1 && K <= T, "importance_scores: K = %d outside [1, T = %lld]", K, (long long)T);
  alpha_of(attn, 0, attn.stride[0], attn.stride[1], T, K, out);
}

std::vector<double> importance_scores(const Tensor& attn, int K) {
  std::vector<double> out(size_t(std::max(K, 0)));
  importance_scores(attn, K, out.data());
  return out;
}

void window_importance_scores(const Tensor& attn, int64_t window, int K, double* out) {
  check_float_cpu(attn, "window_importance_scores", "attn");
  SL_CHECK(attn.ndim == 2, "window_importance_scores: attn must be [T,S], got %s", attn.shape_str().c_str());
  const int64_t T = attn.shape[0], S = attn.shape[1];
  SL_CHECK(S >= T && window >= 1 && window <= T,
           "window_importance_scores: attn %s needs S >= T >= window = %lld >= 1 (no query has a full window)",
           attn.shape_str().c_str(), (long long)window);
  SL_CHECK(K >= 1 && K <= window, "window_importance_scores: K = %d outside [1, window = %lld]", K, (long long)window);
  window_alpha_of(attn, 0, attn.stride[0], attn.stride[1], T, window, K, out);
}

void prefix_importance_scores(const Tensor& attn, int64_t prefix, double* out) {
  check_float_cpu(attn, "prefix_importance_scores", "attn");
  SL_CHECK(attn.ndim == 2, "prefix_importance_scores: attn must be [T,S], got %s", attn.shape_str().c_str());
  const int64_t T = attn.shape[0], S = attn.shape[1];
  SL_CHECK(T >= 1 && S >= T, "prefix_importance_scores: attn %s needs S >= T >= 1", attn.shape_str().c_str());
  SL_CHECK(prefix >= 0, "prefix_importance_scores: prefix %lld < 0", (long long)prefix);
  prefix_alpha_of(attn, 0, attn.stride[0], attn.stride[1], T, prefix, out);
}

double sink_from_alpha(const double* alpha, int64_t n_heads_total, int K, int p, double eps) {
  SL_CHECK(n_heads_total > 0, "sink_from_alpha: no heads");
  SL_CHECK(p >= 0 && p < K, "sink_from_alpha: position %d outside [0, %d)", p, K);
  int64_t above = 0;
  for (int64_t h = 0; h < n_heads_total; ++h) above += alpha[h * K + p] > eps ? 1 : 0;
  return 100.0 * double(above) / double(n_heads_total);
}

void proxy_scores(Tensor out, const Tensor& w, bool absolute) {
  check_float_cpu(w, "proxy_scores", "w");
  check_float_cpu(out, "proxy_scores", "out");
  SL_CHECK(w.ndim >= 2, "proxy_scores: w must be [..., T, S], got %s", w.shape_str().c_str());
  SL_CHECK(out.ndim == w.ndim && std::equal(w.shape.begin(), w.shape.begin() + w.ndim, out.shape.begin()),
           "proxy_scores: out %s does not match w %s", out.shape_str().c_str(), w.shape_str().c_str());
  const int64_t S = w.shape[w.ndim - 1];
  const int64_t rows = S > 0 ? w.numel() / S : 0;
  const int64_t ws = w.stride[w.ndim - 1], os = out.stride[out.ndim - 1];
  auto rows_of = [&](auto* wp, auto* op) {
    // Rows are independent (each row's sum runs over j in order), so threads split them freely.
#pragma omp parallel for schedule(static) if (rows * S >= kParallelMinWork && !omp_in_parallel())
    for (int64_t r = 0; r < rows; ++r) {
      const auto* wr = wp + row_offset(w, r);
      auto* orow = op + row_offset(out, r);
      double z = 0.0;
      for (int64_t j = 0; j < S; ++j) {
        const double v = double(wr[j * ws]);
        z += absolute ? std::fabs(v) : v;
      }
      const double inv = 1.0 / (z + 1e-8);
      for (int64_t j = 0; j < S; ++j) {
        const double v = double(wr[j * ws]);
        orow[j * os] = static_cast<std::remove_reference_t<decltype(*orow)>>((absolute ? std::fabs(v) : v) * inv);
      }
    }
  };
  if (w.dtype == DType::f64 && out.dtype == DType::f64) rows_of(w.ptr<double>(), out.ptr<double>());
  else if (w.dtype == DType::f32 && out.dtype == DType::f32) rows_of(w.ptr<float>(), out.ptr<float>());
  else if (w.dtype == DType::f32) rows_of(w.ptr<float>(), out.ptr<double>());
  else rows_of(w.ptr<double>(), out.ptr<float>());
}

// ---- SinkAccumulator ----------------------------------------------------------------------------

SinkAccumulator::SinkAccumulator(int n_layers, int n_heads, int K, std::vector<double> eps)
    : L_(n_layers), H_(n_heads), K_(K), eps_(std::move(eps)) {
  SL_CHECK(L_ >= 1 && H_ >= 1 && K_ >= 1, "SinkAccumulator: need layers, heads, K >= 1 (got %d, %d, %d)", L_, H_, K_);
  SL_CHECK(!eps_.empty(), "SinkAccumulator: empty threshold list");
  state_.assign(size_t(L_) * H_ * K_ * (1 + eps_.size()) + size_t(L_), 0.0);
}

void SinkAccumulator::reset() { std::fill(state_.begin(), state_.end(), 0.0); }

int SinkAccumulator::eps_index(double eps) const {
  for (size_t e = 0; e < eps_.size(); ++e)
    if (std::fabs(eps_[e] - eps) < 1e-12) return int(e);
  return -1;
}

void SinkAccumulator::add_sample_alpha(int l, int h, const double* alpha) {
  for (int p = 0; p < K_; ++p) {
    state_[alpha_index(l, h, p)] += alpha[p];
    for (size_t e = 0; e < eps_.size(); ++e)
      if (alpha[p] > eps_[e]) state_[count_index(int(e), l, h, p)] += 1.0;
  }
}

template <typename AlphaOf>
void SinkAccumulator::add_heads(int layer, const Tensor& probs, const char* op, AlphaOf alpha_of) {
  check_float_cpu(probs, op, "probs");
  SL_CHECK(layer >= 0 && layer < L_, "%s: layer %d outside [0, %d)", op, layer, L_);
  SL_CHECK(probs.ndim == 4 && probs.shape[1] == H_, "%s: probs must be [B,%d,T,S], got %s", op, H_,
           probs.shape_str().c_str());
  const int64_t B = probs.shape[0], T = probs.shape[2], S = probs.shape[3];
  SL_CHECK(S >= T && T >= K_, "%s: probs %s needs S >= T >= K = %d", op, probs.shape_str().c_str(), K_);
  std::vector<double> alpha(static_cast<size_t>(K_));
  for (int64_t b = 0; b < B; ++b) {
    for (int h = 0; h < H_; ++h) {
      alpha_of(b * probs.stride[0] + h * probs.stride[1], probs.stride[2], probs.stride[3], T, alpha.data());
      add_sample_alpha(layer, h, alpha.data());
    }
  }
  state_[samples_index(layer)] += double(B);
}

void SinkAccumulator::add(int layer, const Tensor& probs) {
  add_heads(layer, probs, "SinkAccumulator::add", [&](int64_t base, int64_t si, int64_t sj, int64_t T, double* out) {
    alpha_of(probs, base, si, sj, T, K_, out);
  });
}

void SinkAccumulator::add_window(int layer, const Tensor& probs, int64_t window) {
  SL_CHECK(probs.ndim == 4 && window >= K_ && window <= probs.shape[2],
           "SinkAccumulator::add_window: needs K = %d <= window = %lld <= T (probs %s)", K_, (long long)window,
           probs.shape_str().c_str());
  add_heads(layer, probs, "SinkAccumulator::add_window",
            [&](int64_t base, int64_t si, int64_t sj, int64_t T, double* out) {
              window_alpha_of(probs, base, si, sj, T, window, K_, out);
            });
}

void SinkAccumulator::add_prefix(int layer, const Tensor& probs, int64_t prefix) {
  SL_CHECK(probs.ndim == 4 && probs.shape[2] == K_ && prefix >= 0,
           "SinkAccumulator::add_prefix: needs K = T = %d and prefix >= 0 (probs %s, prefix %lld)", K_,
           probs.shape_str().c_str(), (long long)prefix);
  add_heads(layer, probs, "SinkAccumulator::add_prefix",
            [&](int64_t base, int64_t si, int64_t sj, int64_t T, double* out) {
              prefix_alpha_of(probs, base, si, sj, T, prefix, out);
            });
}

void SinkAccumulator::add_weights(int layer, const Tensor& weights, bool absolute) {
  check_float_cpu(weights, "SinkAccumulator::add_weights", "weights");
  SL_CHECK(weights.ndim == 4, "SinkAccumulator::add_weights: weights must be [B,H,T,S], got %s",
           weights.shape_str().c_str());
  std::vector<double> buf(size_t(weights.numel()));
  Tensor p = Tensor::contiguous_view(buf.data(), DType::f64, weights.shape.data(), 4, Device::cpu());
  proxy_scores(p, weights, absolute);
  add(layer, p);
}

void SinkAccumulator::add_alpha(int layer, const Tensor& alpha) {
  check_float_cpu(alpha, "SinkAccumulator::add_alpha", "alpha");
  SL_CHECK(layer >= 0 && layer < L_, "SinkAccumulator::add_alpha: layer %d outside [0, %d)", layer, L_);
  SL_CHECK(alpha.ndim == 3 && alpha.shape[1] == H_ && alpha.shape[2] == K_,
           "SinkAccumulator::add_alpha: alpha must be [B,%d,%d], got %s", H_, K_, alpha.shape_str().c_str());
  std::vector<double> a(static_cast<size_t>(K_));
  for (int64_t b = 0; b < alpha.shape[0]; ++b) {
    for (int h = 0; h < H_; ++h) {
      for (int p = 0; p < K_; ++p) a[size_t(p)] = load(alpha, b * alpha.stride[0] + h * alpha.stride[1] + p * alpha.stride[2]);
      add_sample_alpha(layer, h, a.data());
    }
  }
  state_[samples_index(layer)] += double(alpha.shape[0]);
}

int64_t SinkAccumulator::samples() const {
  const double n = state_[samples_index(0)];
  for (int l = 1; l < L_; ++l)
    SL_CHECK(state_[samples_index(l)] == n, "SinkAccumulator: layer %d has %.0f samples, layer 0 has %.0f", l,
             state_[samples_index(l)], n);
  return int64_t(n);
}

std::vector<double> SinkAccumulator::mean_alpha() const {
  const int64_t n = samples();
  SL_CHECK(n > 0, "SinkAccumulator: no samples");
  std::vector<double> out(size_t(L_) * H_ * K_);
  for (size_t i = 0; i < out.size(); ++i) out[i] = state_[i] / double(n);
  return out;
}

double SinkAccumulator::sink(int p, double eps, SinkAveraging avg) const {
  SL_CHECK(p >= 0 && p < K_, "SinkAccumulator::sink: position %d outside [0, K = %d)", p, K_);
  if (avg == SinkAveraging::mean_alpha) {
    std::vector<double> a = mean_alpha();
    return sink_from_alpha(a.data(), int64_t(L_) * H_, K_, p, eps);
  }
  const int e = eps_index(eps);
  SL_CHECK(e >= 0, "SinkAccumulator::sink: threshold %g was not among those accumulated", eps);
  const int64_t n = samples();
  SL_CHECK(n > 0, "SinkAccumulator: no samples");
  double above = 0.0;
  for (int l = 0; l < L_; ++l)
    for (int h = 0; h < H_; ++h) above += state_[count_index(e, l, h, p)];
  return 100.0 * above / (double(n) * L_ * H_);
}

std::vector<double> SinkAccumulator::sinks(int p, SinkAveraging avg) const {
  std::vector<double> out;
  for (double e : eps_) out.push_back(sink(p, e, avg));
  return out;
}

void SinkAccumulator::merge(const SinkAccumulator& o) {
  SL_CHECK(o.L_ == L_ && o.H_ == H_ && o.K_ == K_ && o.eps_ == eps_, "SinkAccumulator::merge: shapes differ");
  for (size_t i = 0; i < state_.size(); ++i) state_[i] += o.state_[i];
}

// ---- norms ------------------------------------------------------------------------------------------

FirstVsRest first_vs_rest_norms(const Tensor& x) {
  check_float_cpu(x, "first_vs_rest_norms", "x");
  SL_CHECK((x.ndim == 2 || x.ndim == 3) && x.shape[0] >= 1,
           "first_vs_rest_norms: x must be [T,d] or [T,G,d] with T >= 1, got %s", x.shape_str().c_str());
  const int64_t T = x.shape[0], width = x.numel() / T;
  // Every row's norm first (in parallel for long inputs), then their sum in row order: the same number
  // whatever the thread count.
  std::vector<double> norms(static_cast<size_t>(T));
#pragma omp parallel for schedule(static) if (T * width >= 8 * kParallelMinWork && !omp_in_parallel())
  for (int64_t t = 0; t < T; ++t)
    norms[size_t(t)] = x.dtype == DType::f64 ? row_norm<double>(x, t) : row_norm<float>(x, t);
  FirstVsRest r;
  r.first = norms[0];
  if (T > 1) {
    double s = 0.0;
    for (int64_t t = 1; t < T; ++t) s += norms[size_t(t)];
    r.rest = s / double(T - 1);
  }
  return r;
}

double massive_ratio(const Tensor& x) {
  SL_CHECK(x.ndim == 2 && x.shape[0] >= 2, "massive_ratio: x must be [T,d] with T >= 2, got %s",
           x.shape_str().c_str());
  FirstVsRest r = first_vs_rest_norms(x);
  SL_CHECK(r.rest > 0.0, "massive_ratio: rows 1..T-1 of x are all zero");
  return r.first / r.rest;
}

}  // namespace sinklab::probe
