// The softmax family of the attention op on cuDNN's fused SDPA, through the cudnn-frontend C++ graph API
// (header-only; env/cudnn_frontend.sh pins it). Behind the reference kernel's signature (attention.cu);
// attention_dispatch.hpp decides when it runs: sim exp, norm sum with alpha 1, causal or sliding-window
// mask, no position bias or ALiBi, the learned sink logit (cuDNN >= 9.13), no lead
// keys, head dim a multiple of 8 up to 128.
//
// Precision: bf16 inside, f32 outside. The CUDA backend's tensors are f32, so q, k, v (and d_out, out)
// are converted into bf16 scratch and the results back (ops' copy kernels): the stepping stone until
// `--precision bf16` keeps bf16 activations, when these copies go. cuDNN accumulates in f32 and its
// softmax is f32; the comparison with the reference (tests/cpp/gpu/test_cuda_attention_fast.cpp) states
// the bf16 tolerance.
//
// Stats: cuDNN's Stats output is the natural-log log-sum-exp of each row of scaled scores, sink logit
// included (the frontend's softmax node adds exp(sink - max) to the row sum), i.e. log Z_i: exactly the
// reference's row statistic for softmax (attention_math.hpp, stat_i = m_i + log Z~_i). cuDNN writes it
// into contiguous scratch [B,H,T,1], copied into the op's (possibly strided) stats [B,H,T]; the backward
// reads stats the same way. So a forward on one kernel and a backward on another agree.
//
// Sink logit: cuDNN's sink token, a [1,H,1,1] f32 tensor. Its gradient dSink is the loss gradient
// dL/dS = -sum_{b,i} P_i,sink D_i (with Z = e^S + sum_j e^{s_j}, dP_j/dS = -P_j P_sink; attention_math.hpp's
// attn_dscore with dP = 0), copied as it is. Measured, not read: the frontend's graph
// (node/scaled_dot_product_flash_attention.h) reads like +sum P_sink D, and the first version here
// negated it; on an H200 with cuDNN 9.14 (2026-11-28) test_cuda_attention_fast's sink cases then came out
// with the sign flipped (error 2.0 of the largest |d_sink_logit|), and without the negation they pass.
// cuDNN refuses a sink token with one query (its decode mode, s_q = 1): attention_dispatch.cpp does not
// pick cuDNN for such a call.
//
// Graphs are built once per shape and options (the key below) and cached for the backend's life; the
// tensors are bound by uid at every execution. The backward runs cuDNN's deterministic algorithm when
// spec.deterministic (the default; the reference kernels are always deterministic).
#include <cudnn.h>

#include <cstring>
#include <map>
#include <memory>
#include <tuple>
#include <unordered_map>
#include <vector>

#include <cudnn_frontend.h>

#include "backend/cuda/attention_kernels.hpp"
#include "backend/cuda/cuda_common.hpp"
#include "core/error.hpp"

namespace sinklab::cuda {

namespace fe = cudnn_frontend;

int64_t cudnn_library_version() { return int64_t(cudnnGetVersion()); }

namespace {

#define CUDNN_CHECK(call)                                                                            \
  do {                                                                                               \
    cudnnStatus_t sl_cudnn_st_ = (call);                                                             \
    if (sl_cudnn_st_ != CUDNN_STATUS_SUCCESS)                                                        \
      SL_FAIL("cuDNN call %s failed at %s:%d: %s", #call, __FILE__, __LINE__,                        \
              cudnnGetErrorString(sl_cudnn_st_));                                                    \
  } while (0)

// A cudnn-frontend call: its error_t carries a message.
void fe_check(fe::error_t e, const char* what) {
  if (e.is_bad()) SL_FAIL("--attn-kernel cudnn: %s: %s", what, e.get_message().c_str());
}

// Tensor uids of the variant pack.
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSink, kdO, kdQ, kdK, kdV, kdSink };

// Everything a graph depends on.
struct GraphKey {
  bool backward = false;
  int64_t B = 0, T = 0, H = 0, Hkv = 0, dh = 0;
  uint32_t scale_bits = 0;
  int64_t window = 0;  // 0: causal
  bool alibi = false, sink = false, deterministic = false;
  auto tie() const { return std::tie(backward, B, T, H, Hkv, dh, scale_bits, window, alibi, sink, deterministic); }
  bool operator<(const GraphKey& o) const { return tie() < o.tie(); }
};

struct CachedGraph {
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace_bytes = 0;
};

}  // namespace

// The backend's cuDNN handle (on its stream) and graph cache; created on first use, kept for its life.
struct CudnnContext {
  cudnnHandle_t handle = nullptr;
  std::map<GraphKey, CachedGraph> graphs;
};

CudnnContext& CudaBackend::cudnn_context() {
  if (cudnn_) return *cudnn_;
  DeviceGuard guard(index_);
  auto* c = new CudnnContext;
  CUDNN_CHECK(cudnnCreate(&c->handle));
  CUDNN_CHECK(cudnnSetStream(c->handle, stream_));
  cudnn_ = c;
  return *cudnn_;
}

namespace {

// [B, H, L, dh] logical dims of a [B, L, H, dh] contiguous buffer (the bf16 scratch layout).
std::vector<int64_t> bshd_dims(int64_t B, int64_t L, int64_t H, int64_t dh) { return {B, H, L, dh}; }
std::vector<int64_t> bshd_strides(int64_t L, int64_t H, int64_t dh) { return {L * H * dh, dh, H * dh, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> bf16_tensor(fe::graph::Graph& g, const char* name, int64_t uid,
                                                          int64_t B, int64_t L, int64_t H, int64_t dh) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(bshd_dims(B, L, H, dh))
                      .set_stride(bshd_strides(L, H, dh))
                      .set_data_type(fe::DataType_t::BFLOAT16));
}

template <class Attrs>
void set_mask(Attrs& a, const GraphKey& key) {
  // Causal: query i sees keys j <= i (top-left aligned diagonal, no keys to its right). Sliding window w:
  // also j > i - w (the frontend's left-bound mask keeps column + w > row: utils/attn_score_modifiers.h).
  a.set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT).set_diagonal_band_right_bound(0);
  if (key.window > 0) a.set_diagonal_band_left_bound(int(key.window));
  if (key.alibi) a.set_alibi_mask(true);
}

CachedGraph build_graph(CudnnContext& ctx, const GraphKey& key) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  float scale = 0.0f;
  std::memcpy(&scale, &key.scale_bits, sizeof scale);
  const int64_t B = key.B, T = key.T, H = key.H, Hkv = key.Hkv, dh = key.dh;
  auto Q = bf16_tensor(*g, "Q", kQ, B, T, H, dh);
  auto K = bf16_tensor(*g, "K", kK, B, T, Hkv, dh);
  auto V = bf16_tensor(*g, "V", kV, B, T, Hkv, dh);
  std::shared_ptr<fe::graph::Tensor_attributes> sink;
  if (key.sink)
    sink = g->tensor(fe::graph::Tensor_attributes()
                         .set_name("sink")
                         .set_uid(kSink)
                         .set_dim({1, H, 1, 1})
                         .set_stride({H, 1, 1, 1})
                         .set_data_type(fe::DataType_t::FLOAT));
  if (!key.backward) {
    fe::graph::SDPA_attributes a;
    a.set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
    set_mask(a, key);
    if (sink) a.set_sink_token(sink);
    auto [O, Stats] = g->sdpa(Q, K, V, a);
    O->set_output(true).set_uid(kO).set_dim(bshd_dims(B, T, H, dh)).set_stride(bshd_strides(T, H, dh));
    Stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({B, H, T, 1}).set_stride(
        {H * T, T, 1, 1});
  } else {
    auto O = bf16_tensor(*g, "O", kO, B, T, H, dh);
    auto dO = bf16_tensor(*g, "dO", kdO, B, T, H, dh);
    auto Stats = g->tensor(fe::graph::Tensor_attributes()
                               .set_name("Stats")
                               .set_uid(kStats)
                               .set_dim({B, H, T, 1})
                               .set_stride({H * T, T, 1, 1})
                               .set_data_type(fe::DataType_t::FLOAT));
    fe::graph::SDPA_backward_attributes a;
    a.set_name("sdpa_backward").set_attn_scale(scale).set_deterministic_algorithm(key.deterministic);
    set_mask(a, key);
    std::shared_ptr<fe::graph::Tensor_attributes> dsink;
    if (sink) {
      dsink = g->tensor(fe::graph::Tensor_attributes()
                            .set_name("dSink")
                            .set_uid(kdSink)
                            .set_dim({1, H, 1, 1})
                            .set_stride({H, 1, 1, 1})
                            .set_data_type(fe::DataType_t::FLOAT));
      a.set_sink_token(sink).set_dsink_token(dsink);
    }
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, a);
    dQ->set_output(true).set_uid(kdQ).set_dim(bshd_dims(B, T, H, dh)).set_stride(bshd_strides(T, H, dh));
    dK->set_output(true).set_uid(kdK).set_dim(bshd_dims(B, T, Hkv, dh)).set_stride(bshd_strides(T, Hkv, dh));
    dV->set_output(true).set_uid(kdV).set_dim(bshd_dims(B, T, Hkv, dh)).set_stride(bshd_strides(T, Hkv, dh));
  }
  fe_check(g->validate(), "graph validation");
  fe_check(g->build_operation_graph(ctx.handle), "building the operation graph");
  fe_check(g->create_execution_plans({fe::HeurMode_t::A}), "creating execution plans");
  fe_check(g->check_support(ctx.handle), "this attention is not supported by the loaded cuDNN");
  fe_check(g->build_plans(ctx.handle), "building the plan");
  CachedGraph c;
  c.graph = g;
  fe_check(g->get_workspace_size(c.workspace_bytes), "workspace size");
  return c;
}

const CachedGraph& graph_for(CudnnContext& ctx, const GraphKey& key) {
  auto it = ctx.graphs.find(key);
  if (it == ctx.graphs.end()) it = ctx.graphs.emplace(key, build_graph(ctx, key)).first;
  return it->second;
}

GraphKey key_of(const AttentionDims& d, const ops::AttentionSpec& spec, bool backward) {
  GraphKey key;
  key.backward = backward;
  key.B = d.B;
  key.T = d.T;
  key.H = d.H;
  key.Hkv = d.Hkv;
  key.dh = d.dh;
  const float scale = float(attention_scale(spec, d.dh));
  std::memcpy(&key.scale_bits, &scale, sizeof scale);
  key.window = spec.mask == ops::AttnMask::sliding_window ? spec.window : 0;
  key.alibi = spec.pos_bias == ops::AttnPosBias::alibi;
  key.sink = spec.sink_logit.defined();
  key.deterministic = backward && spec.deterministic;
  return key;
}

// The call's scratch (one slot): bf16 copies of q, k, v, out (and, backward, d_out, d_q, d_k, d_v), f32
// stats, sink and d_sink, then cuDNN's workspace; each array 256-byte aligned. Laid out by one walk that
// both measures (base null) and places the arrays, so the size and the views cannot disagree.
struct Scratch {
  Tensor q, k, v, o, d_out, d_q, d_k, d_v, stats, sink, d_sink;
  void* workspace = nullptr;
};
size_t carve(char* base, const AttentionDims& d, bool backward, Device device, Scratch* s) {
  size_t at = 0;
  auto take = [&](DType dt, std::initializer_list<int64_t> shape) {
    int64_t dims[4];
    int n = 0;
    int64_t numel = 1;
    for (int64_t x : shape) numel *= (dims[n++] = x);
    Tensor t = base ? Tensor::contiguous_view(base + at, dt, dims, n, device) : Tensor{};
    at += (size_t(numel) * size_t(dtype_size(dt)) + 255) / 256 * 256;
    return t;
  };
  s->q = take(DType::bf16, {d.B, d.T, d.H, d.dh});
  s->k = take(DType::bf16, {d.B, d.T, d.Hkv, d.dh});
  s->v = take(DType::bf16, {d.B, d.T, d.Hkv, d.dh});
  s->o = take(DType::bf16, {d.B, d.T, d.H, d.dh});
  if (backward) {
    s->d_out = take(DType::bf16, {d.B, d.T, d.H, d.dh});
    s->d_q = take(DType::bf16, {d.B, d.T, d.H, d.dh});
    s->d_k = take(DType::bf16, {d.B, d.T, d.Hkv, d.dh});
    s->d_v = take(DType::bf16, {d.B, d.T, d.Hkv, d.dh});
  }
  s->stats = take(DType::f32, {d.B, d.H, d.T});
  s->sink = take(DType::f32, {d.H});
  s->d_sink = take(DType::f32, {d.H});
  s->workspace = base ? base + at : nullptr;
  return at;
}

Scratch scratch_for(CudaBackend& be, const AttentionDims& d, bool backward, const CachedGraph& cg, Device device) {
  Scratch s;
  const size_t bytes = carve(nullptr, d, backward, device, &s) + size_t(cg.workspace_bytes);
  carve(static_cast<char*>(be.scratch(CudaBackend::ScratchSlot::attention_fast, bytes)), d, backward, device, &s);
  return s;
}

}  // namespace

// out [B,T,H,dh], stats [B,H,T] (optional) from q [B,T,H,dh], k/v [B,T,Hkv,dh] (no lead keys: S = T).
void cudnn_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                             const ops::AttentionSpec& spec, const AttentionDims& d) {
  if (d.B * d.H * d.T == 0) return;
  DeviceGuard guard(be.index());
  CudnnContext& ctx = be.cudnn_context();
  const GraphKey key = key_of(d, spec, false);
  const CachedGraph& cg = graph_for(ctx, key);
  const Scratch sc = scratch_for(be, d, false, cg, q.device);
  be.copy(sc.q, q);
  be.copy(sc.k, k);
  be.copy(sc.v, v);
  std::unordered_map<int64_t, void*> pack = {
      {kQ, sc.q.data}, {kK, sc.k.data}, {kV, sc.v.data}, {kO, sc.o.data}, {kStats, sc.stats.data}};
  if (key.sink) {
    be.copy(sc.sink, spec.sink_logit);  // [H] (strided) -> contiguous f32
    pack[kSink] = sc.sink.data;
  }
  fe_check(cg.graph->execute(ctx.handle, pack, sc.workspace), "forward");
  be.copy(out, sc.o);
  if (stats.defined()) be.copy(stats, sc.stats);
}

// d_q, d_k, d_v (each optional, written), spec.d_sink_logit (optional, written) from d_out, q, k, v,
// out and stats.
void cudnn_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                              Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                              const AttentionDims& d) {
  if (d.B * d.H * d.T == 0) return;
  DeviceGuard guard(be.index());
  CudnnContext& ctx = be.cudnn_context();
  const GraphKey key = key_of(d, spec, true);
  const CachedGraph& cg = graph_for(ctx, key);
  const Scratch sc = scratch_for(be, d, true, cg, q.device);
  be.copy(sc.q, q);
  be.copy(sc.k, k);
  be.copy(sc.v, v);
  be.copy(sc.o, out);
  be.copy(sc.d_out, d_out);
  be.copy(sc.stats, stats);
  std::unordered_map<int64_t, void*> pack = {{kQ, sc.q.data},         {kK, sc.k.data},     {kV, sc.v.data},
                                             {kO, sc.o.data},         {kdO, sc.d_out.data}, {kStats, sc.stats.data},
                                             {kdQ, sc.d_q.data},      {kdK, sc.d_k.data},  {kdV, sc.d_v.data}};
  if (key.sink) {
    be.copy(sc.sink, spec.sink_logit);
    pack[kSink] = sc.sink.data;
    pack[kdSink] = sc.d_sink.data;
  }
  fe_check(cg.graph->execute(ctx.handle, pack, sc.workspace), "backward");
  if (d_q.defined()) be.copy(d_q, sc.d_q);
  if (d_k.defined()) be.copy(d_k, sc.d_k);
  if (d_v.defined()) be.copy(d_v, sc.d_v);
  if (key.sink && spec.d_sink_logit.defined()) {
    be.copy(spec.d_sink_logit, sc.d_sink);  // cuDNN's dSink is dL/dS itself (see the top)
  }
}

}  // namespace sinklab::cuda
