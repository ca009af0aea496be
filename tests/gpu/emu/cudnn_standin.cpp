// The cuDNN SDPA stand-in (cudnn_standin.hpp): the graph's tensors read through their dims and strides, the
// attention computed on the host in double.
#include "cudnn_standin.hpp"

#include <cmath>
#include <set>

struct cudnnContext {
  cudaStream_t stream = nullptr;
};

cudnnStatus_t cudnnCreate(cudnnHandle_t* h) {
  *h = new cudnnContext;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  delete h;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s) {
  if (!h) return CUDNN_STATUS_BAD_PARAM;
  h->stream = s;
  return CUDNN_STATUS_SUCCESS;
}
size_t cudnnGetVersion() { return 91900; }  // the headers sinklab builds against (env/gpu_bundle.sh: 9.19)
const char* cudnnGetErrorString(cudnnStatus_t s) {
  return s == CUDNN_STATUS_SUCCESS ? "CUDNN_STATUS_SUCCESS" : "CUDNN_STATUS_(stand-in error)";
}

namespace cudnn_frontend::graph {
namespace {

using E = error_code_t;

error_t bad(E c, const std::string& m) { return error_t(c, "cuDNN stand-in: " + m); }

DataType_t type_of(const Graph& g, const Tensor_attributes& t) {
  return t.data_type != DataType_t::NOT_SET ? t.data_type : g.io_type;
}
size_t bytes_of(DataType_t t) {
  switch (t) {
    case DataType_t::FLOAT:
    case DataType_t::INT32: return 4;
    case DataType_t::DOUBLE: return 8;
    case DataType_t::HALF:
    case DataType_t::BFLOAT16: return 2;
    case DataType_t::NOT_SET: return 0;
  }
  return 0;
}

// A bound tensor: element (i0, i1, i2, i3) at base + sum i_k stride_k, in its type.
struct Bound {
  void* p = nullptr;
  DataType_t type = DataType_t::NOT_SET;
  int64_t dim[4] = {1, 1, 1, 1}, stride[4] = {0, 0, 0, 0};
  int64_t off(int64_t a, int64_t b, int64_t c, int64_t d) const {
    return a * stride[0] + b * stride[1] + c * stride[2] + d * stride[3];
  }
  double get(int64_t a, int64_t b, int64_t c, int64_t d) const {
    const int64_t i = off(a, b, c, d);
    if (type == DataType_t::FLOAT) return static_cast<const float*>(p)[i];
    return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
  }
  void set(int64_t a, int64_t b, int64_t c, int64_t d, double v) const {
    const int64_t i = off(a, b, c, d);
    if (type == DataType_t::FLOAT)
      static_cast<float*>(p)[i] = float(v);
    else
      static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16(float(v));
  }
};

error_t check_tensor(const Graph& g, const Tensor_t& t, const char* what) {
  if (!t) return bad(E::ATTRIBUTE_NOT_SET, std::string(what) + " is missing");
  if (t->dim.size() != 4 || t->stride.size() != 4)
    return bad(E::ATTRIBUTE_NOT_SET, std::string(what) + " needs 4 dims and 4 strides");
  if (!t->has_uid) return bad(E::ATTRIBUTE_NOT_SET, std::string(what) + " has no uid");
  const DataType_t ty = type_of(g, *t);
  if (ty != DataType_t::FLOAT && ty != DataType_t::BFLOAT16)
    return bad(E::GRAPH_NOT_SUPPORTED, std::string(what) + ": the stand-in reads f32 and bf16 tensors");
  for (int k = 0; k < 4; ++k)
    if (t->dim[size_t(k)] < 1 || t->stride[size_t(k)] < 0)
      return bad(E::INVALID_VALUE, std::string(what) + ": a dim < 1 or a negative stride");
  return {};
}

error_t bind(const Graph& g, const Tensor_t& t, std::unordered_map<int64_t, void*>& pack, Bound* out, const char* what) {
  auto it = pack.find(t->uid);
  if (it == pack.end() || !it->second) return bad(E::GRAPH_EXECUTION_FAILED, std::string(what) + ": no pointer bound");
  out->p = it->second;
  out->type = type_of(g, *t);
  int64_t last = 0;
  for (int k = 0; k < 4; ++k) {
    out->dim[k] = t->dim[size_t(k)];
    out->stride[k] = t->stride[size_t(k)];
    last += (out->dim[k] - 1) * out->stride[k];
  }
  emu::require_device_range(out->p, size_t(last + 1) * bytes_of(out->type), what);
  return {};
}

bool same(const std::vector<int64_t>& d, std::initializer_list<int64_t> want) {
  return std::equal(d.begin(), d.end(), want.begin(), want.end());
}

// get_alibi_slope (cudnn_frontend_utils.h), in f32 as there.
std::vector<float> alibi_slopes(int64_t n_heads) {
  std::vector<float> slope;
  const int n = 1 << int(std::log2(double(n_heads)));
  for (int i = 0; i < n; ++i) slope.push_back(float(i + 1.0));
  for (int i = 0; i < 2 * (n_heads - n); i += 2) slope.push_back(float(i + 1) * 0.5f);
  for (float& e : slope) e = std::pow(2.0f, e * -8.0f / float(n));
  return slope;
}

}  // namespace

std::array<Tensor_t, 2> Graph::sdpa(Tensor_t q, Tensor_t k, Tensor_t v, SDPA_attributes a) {
  has_node = true;
  backward = false;
  Q = std::move(q);
  K = std::move(k);
  V = std::move(v);
  fwd = std::move(a);
  O = std::make_shared<Tensor_attributes>();
  Stats = std::make_shared<Tensor_attributes>();
  tensors.push_back(O);
  tensors.push_back(Stats);
  return {O, Stats};
}

std::array<Tensor_t, 3> Graph::sdpa_backward(Tensor_t q, Tensor_t k, Tensor_t v, Tensor_t o, Tensor_t d_o,
                                             Tensor_t stats, SDPA_backward_attributes a) {
  has_node = true;
  backward = true;
  Q = std::move(q);
  K = std::move(k);
  V = std::move(v);
  O = std::move(o);
  dO = std::move(d_o);
  Stats = std::move(stats);
  bwd = std::move(a);
  dQ = std::make_shared<Tensor_attributes>();
  dK = std::make_shared<Tensor_attributes>();
  dV = std::make_shared<Tensor_attributes>();
  tensors.push_back(dQ);
  tensors.push_back(dK);
  tensors.push_back(dV);
  return {dQ, dK, dV};
}

error_t Graph::validate() {
  if (!has_node) return bad(E::ATTRIBUTE_NOT_SET, "no SDPA node");
  if (io_type != DataType_t::BFLOAT16 && io_type != DataType_t::HALF)
    return bad(E::GRAPH_NOT_SUPPORTED, "SDPA's io type must be bf16 or f16");
  if (!(backward ? bwd.attn_scale : fwd.attn_scale)) return bad(E::ATTRIBUTE_NOT_SET, "attn_scale is not set");
  const std::vector<std::pair<const Tensor_t*, const char*>> all =
      backward ? std::vector<std::pair<const Tensor_t*, const char*>>{{&Q, "Q"},       {&K, "K"},   {&V, "V"},
                                                                     {&O, "O"},       {&dO, "dO"}, {&Stats, "Stats"},
                                                                     {&dQ, "dQ"},     {&dK, "dK"}, {&dV, "dV"}}
               : std::vector<std::pair<const Tensor_t*, const char*>>{
                     {&Q, "Q"}, {&K, "K"}, {&V, "V"}, {&O, "O"}, {&Stats, "Stats"}};
  std::set<int64_t> uids;
  for (const auto& [t, name] : all) {
    if (error_t e = check_tensor(*this, *t, name); e.is_bad()) return e;
    if (!uids.insert((*t)->uid).second) return bad(E::INVALID_VALUE, std::string("uid of ") + name + " is not unique");
  }
  const int64_t b = Q->dim[0], hq = Q->dim[1], sq = Q->dim[2], d = Q->dim[3];
  const int64_t hk = K->dim[1], skv = K->dim[2];
  if (!same(K->dim, {b, hk, skv, d}) || !same(V->dim, {b, hk, skv, d}))
    return bad(E::INVALID_VALUE, "K and V dims disagree with Q's (b, d) or with each other");
  if (hk < 1 || hq % hk != 0) return bad(E::INVALID_VALUE, "h_q must be a multiple of h_kv");
  if (d % 8 != 0 || d > 128) return bad(E::GRAPH_NOT_SUPPORTED, "head dim must be a multiple of 8 and at most 128");
  if (!same(O->dim, {b, hq, sq, d})) return bad(E::INVALID_VALUE, "O dims must be [b, h_q, s_q, d]");
  if (!same(Stats->dim, {b, hq, sq, 1})) return bad(E::INVALID_VALUE, "Stats dims must be [b, h_q, s_q, 1]");
  if (type_of(*this, *Stats) != DataType_t::FLOAT) return bad(E::INVALID_VALUE, "Stats must be f32");
  for (const Tensor_t* t : {&Q, &K, &V, &O})
    if ((*t)->stride[3] != 1) return bad(E::GRAPH_NOT_SUPPORTED, "the head dim of Q, K, V, O must be contiguous");
  if (backward) {
    if (!same(dO->dim, {b, hq, sq, d}) || !same(dQ->dim, {b, hq, sq, d}) || !same(dK->dim, {b, hk, skv, d}) ||
        !same(dV->dim, {b, hk, skv, d}))
      return bad(E::INVALID_VALUE, "dO / dQ / dK / dV dims disagree with Q / K / V");
    if (bwd.dsink && !bwd.sink) return bad(E::INVALID_VALUE, "If dsink is set, sink also needs to be set.");
  } else if (!fwd.generate_stats) {
    return bad(E::INVALID_VALUE, "the stand-in needs generate_stats (sinklab's graphs set it)");
  }
  const Tensor_t& sink = backward ? bwd.sink : fwd.sink;
  for (const Tensor_t* t : {static_cast<const Tensor_t*>(&sink), static_cast<const Tensor_t*>(&bwd.dsink)}) {
    if (!*t || (t == &bwd.dsink && !backward)) continue;
    if (error_t e = check_tensor(*this, *t, "sink"); e.is_bad()) return e;
    if (!same((*t)->dim, {1, hq, 1, 1}) || type_of(*this, **t) != DataType_t::FLOAT)
      return bad(E::INVALID_VALUE, "the sink token must be f32 [1, h_q, 1, 1]");
  }
  if (sq != skv) return bad(E::GRAPH_NOT_SUPPORTED, "the stand-in covers s_q == s_kv (sinklab's graphs)");
  if (sink && sq == 1)
    return bad(E::GRAPH_NOT_SUPPORTED, "decode only mode, i.e. s_q == 1, not supported with sink_token");
  validated = true;
  return {};
}

error_t Graph::build_operation_graph(cudnnHandle_t h) {
  if (!validated) return bad(E::INVALID_VALUE, "build_operation_graph before validate");
  return h ? error_t{} : bad(E::INVALID_VALUE, "no handle");
}
error_t Graph::create_execution_plans(const std::vector<HeurMode_t>& modes) {
  return modes.empty() ? bad(E::INVALID_VALUE, "no heuristic mode") : error_t{};
}
error_t Graph::check_support(cudnnHandle_t h) { return h ? error_t{} : bad(E::INVALID_VALUE, "no handle"); }
error_t Graph::build_plans(cudnnHandle_t h) {
  built = h != nullptr;
  return built ? error_t{} : bad(E::INVALID_VALUE, "no handle");
}
error_t Graph::get_workspace_size(int64_t& bytes) const {
  bytes = 4096;
  return {};
}

error_t Graph::execute(cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack, void* workspace) const {
  if (!h || !built) return bad(E::GRAPH_EXECUTION_FAILED, "execute before build_plans");
  emu::require_device_range(workspace, 4096, "cuDNN stand-in workspace");
  Bound q, k, v, o, st, sink, dsink, dout, dq, dk, dv;
  if (error_t e = bind(*this, Q, pack, &q, "Q"); e.is_bad()) return e;
  if (error_t e = bind(*this, K, pack, &k, "K"); e.is_bad()) return e;
  if (error_t e = bind(*this, V, pack, &v, "V"); e.is_bad()) return e;
  if (error_t e = bind(*this, O, pack, &o, "O"); e.is_bad()) return e;
  if (error_t e = bind(*this, Stats, pack, &st, "Stats"); e.is_bad()) return e;
  const float scale = backward ? *bwd.attn_scale : *fwd.attn_scale;
  const std::optional<int> right = backward ? bwd.right_bound : fwd.right_bound;
  const std::optional<int> left = backward ? bwd.left_bound : fwd.left_bound;
  const bool alibi = backward ? bwd.alibi : fwd.alibi;
  const DiagonalAlignment_t align = backward ? bwd.alignment : fwd.alignment;
  const Tensor_t& sink_t = backward ? bwd.sink : fwd.sink;
  if (align != DiagonalAlignment_t::TOP_LEFT && (right || left))
    return bad(E::GRAPH_NOT_SUPPORTED, "the stand-in covers TOP_LEFT diagonal alignment (sinklab's)");
  if (sink_t)
    if (error_t e = bind(*this, sink_t, pack, &sink, "sink"); e.is_bad()) return e;
  if (backward) {
    if (error_t e = bind(*this, dO, pack, &dout, "dO"); e.is_bad()) return e;
    if (error_t e = bind(*this, dQ, pack, &dq, "dQ"); e.is_bad()) return e;
    if (error_t e = bind(*this, dK, pack, &dk, "dK"); e.is_bad()) return e;
    if (error_t e = bind(*this, dV, pack, &dv, "dV"); e.is_bad()) return e;
    if (bwd.dsink)
      if (error_t e = bind(*this, bwd.dsink, pack, &dsink, "dSink"); e.is_bad()) return e;
  }
  emu::count_library_call();  // the step ledger's count (cuda_emu.hpp)
  if (emu::count_only()) return {};
  const int64_t B = q.dim[0], Hq = q.dim[1], T = q.dim[2], D = q.dim[3], Hk = k.dim[1], S = k.dim[2];
  const int64_t group = Hq / Hk;
  const std::vector<float> slopes = alibi ? alibi_slopes(Hq) : std::vector<float>();
  auto visible = [&](int64_t i, int64_t j) {
    if (right && j > i + *right) return false;
    if (left && !(j + *left > i)) return false;
    return true;
  };
  auto score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    double s = 0.0;
    for (int64_t e = 0; e < D; ++e) s += q.get(b, h, i, e) * k.get(b, h / group, j, e);
    double x = double(scale) * s;
    if (alibi) x += double(slopes[size_t(h)]) * double(j - i);
    return x;
  };
  std::vector<double> acc_k, acc_v, dsink_acc(size_t(Hq), 0.0);
  if (backward) {
    acc_k.assign(size_t(B * Hk * S * D), 0.0);
    acc_v.assign(size_t(B * Hk * S * D), 0.0);
  }
  std::vector<double> s_row(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t hk = h / group;
        for (int64_t j = 0; j < S; ++j) s_row[size_t(j)] = visible(i, j) ? score(b, h, i, j) : -INFINITY;
        if (!backward) {
          double m = -INFINITY;
          for (int64_t j = 0; j < S; ++j) m = std::max(m, s_row[size_t(j)]);
          const double sink_logit = sink_t ? sink.get(0, h, 0, 0) : -INFINITY;
          m = std::max(m, sink_logit);
          double z = sink_t ? std::exp(sink_logit - m) : 0.0;
          for (int64_t j = 0; j < S; ++j)
            if (s_row[size_t(j)] > -INFINITY) z += std::exp(s_row[size_t(j)] - m);
          for (int64_t e = 0; e < D; ++e) {
            double out = 0.0;
            for (int64_t j = 0; j < S; ++j)
              if (s_row[size_t(j)] > -INFINITY) out += std::exp(s_row[size_t(j)] - m) * v.get(b, hk, j, e);
            o.set(b, h, i, e, out / z);
          }
          st.set(b, h, i, 0, m + std::log(z));
          continue;
        }
        const double stat = st.get(b, h, i, 0);
        double Di = 0.0;
        for (int64_t e = 0; e < D; ++e) Di += dout.get(b, h, i, e) * o.get(b, h, i, e);
        if (sink_t) dsink_acc[size_t(h)] -= std::exp(sink.get(0, h, 0, 0) - stat) * Di;
        std::vector<double> dq_row(size_t(D), 0.0);
        for (int64_t j = 0; j < S; ++j) {
          if (s_row[size_t(j)] == -INFINITY) continue;
          const double p = std::exp(s_row[size_t(j)] - stat);
          double dp = 0.0;
          for (int64_t e = 0; e < D; ++e) dp += dout.get(b, h, i, e) * v.get(b, hk, j, e);
          const double ds = p * (dp - Di);
          for (int64_t e = 0; e < D; ++e) {
            dq_row[size_t(e)] += double(scale) * ds * k.get(b, hk, j, e);
            const size_t kv = size_t(((b * Hk + hk) * S + j) * D + e);
            acc_k[kv] += double(scale) * ds * q.get(b, h, i, e);
            acc_v[kv] += p * dout.get(b, h, i, e);
          }
        }
        for (int64_t e = 0; e < D; ++e) dq.set(b, h, i, e, dq_row[size_t(e)]);
      }
  if (backward) {
    for (int64_t b = 0; b < B; ++b)
      for (int64_t hk = 0; hk < Hk; ++hk)
        for (int64_t j = 0; j < S; ++j)
          for (int64_t e = 0; e < D; ++e) {
            const size_t kv = size_t(((b * Hk + hk) * S + j) * D + e);
            dk.set(b, hk, j, e, acc_k[kv]);
            dv.set(b, hk, j, e, acc_v[kv]);
          }
    if (bwd.dsink)
      for (int64_t h = 0; h < Hq; ++h) dsink.set(0, h, 0, 0, dsink_acc[size_t(h)]);
  }
  return {};
}

}  // namespace cudnn_frontend::graph
