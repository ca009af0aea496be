// The softmax family of the attention op on cuDNN's fused SDPA, through the cudnn-frontend C++ graph API
// (header-only; env/cudnn_frontend.sh pins it). Behind the reference kernel's signature (attention.cu);
// attention_dispatch.hpp decides when it runs: sim exp, norm sum with alpha 1, causal or sliding-window
// mask, no position bias or ALiBi, the learned sink logit (cuDNN >= 9.13), no lead
// keys, head dim a multiple of 8 up to 128.
//
// Precision: bf16 inside. bf16 tensors are cuDNN's own: q, k, v, out (and d_out, d_q, d_k, d_v) are bound as
// they are, strided views included (the training step's head views of one fused projection buffer
// [B*T, (H+2Hkv)*dh] and of its gradient: each graph tensor carries its view's strides, as llm.c's
// cudnn_att.cpp does), so a bf16 call copies and converts nothing. f32 tensors are converted into bf16 scratch
// and the results back (ops' copy kernels), as before the bf16 step: that path's arithmetic is unchanged.
// cuDNN accumulates in f32 and its softmax is f32; the comparison with the reference
// (tests/cpp/gpu/test_cuda_attention_fast.cpp) states the bf16 tolerance.
//
// Stats: cuDNN's Stats output is the natural-log log-sum-exp of each row of scaled scores, sink logit
// included (the frontend's softmax node adds exp(sink - max) to the row sum), i.e. log Z_i: exactly the
// reference's row statistic for softmax (attention_math.hpp, stat_i = m_i + log Z~_i). cuDNN reads and writes
// the op's stats [B,H,T] (f32 with either dtype) in place when it is contiguous, else through contiguous
// scratch [B,H,T,1]. So a forward on one kernel and a backward on another agree.
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
// Graphs are built once per shape, layout (every bound tensor's strides) and options (the key below) and
// cached for the backend's life; the tensors are bound by uid at every execution. A graph's build is paid by
// the first call of its shape (bench_attention_gpu prints that call apart, first_ms). The backward runs
// cuDNN's deterministic algorithm when spec.deterministic (the default; the reference kernels are always
// deterministic).
#include <cudnn.h>

#include <array>
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
enum Uid : int64_t { kQ = 1, kK, kV, kO, kStats, kSink, kdO, kdQ, kdK, kdV, kdSink, kUids };

// cuDNN's [B, heads, L, dh] strides of one bound tensor ([B, H, T, 1] for the stats, [1, H, 1, 1] the sink's).
using Strides = std::array<int64_t, 4>;

// Everything a graph depends on.
struct GraphKey {
  bool backward = false;
  int64_t B = 0, T = 0, H = 0, Hkv = 0, dh = 0;
  uint32_t scale_bits = 0;
  int64_t window = 0;  // 0: causal
  bool alibi = false, sink = false, deterministic = false;
  std::array<Strides, kUids> strides{};  // by uid
  auto tie() const {
    return std::tie(backward, B, T, H, Hkv, dh, scale_bits, window, alibi, sink, deterministic, strides);
  }
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

// [B, H, L, dh] logical dims of a [B, L, H, dh] tensor; its strides in that order.
std::vector<int64_t> bshd_dims(int64_t B, int64_t L, int64_t H, int64_t dh) { return {B, H, L, dh}; }
// cuDNN's order of the strides (s0, s1, s2, s3) of a [B, L, heads, dh] tensor.
Strides bshd(int64_t s0, int64_t s1, int64_t s2, int64_t s3) { return {s0, s2, s1, s3}; }
std::vector<int64_t> vec(const Strides& s) { return {s[0], s[1], s[2], s[3]}; }

std::shared_ptr<fe::graph::Tensor_attributes> bf16_tensor(fe::graph::Graph& g, const GraphKey& key, const char* name,
                                                          Uid uid, int64_t L, int64_t H) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(bshd_dims(key.B, L, H, key.dh))
                      .set_stride(vec(key.strides[uid]))
                      .set_data_type(fe::DataType_t::BFLOAT16));
}
std::shared_ptr<fe::graph::Tensor_attributes> f32_tensor(fe::graph::Graph& g, const GraphKey& key, const char* name,
                                                         Uid uid, std::vector<int64_t> dims) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim(std::move(dims))
                      .set_stride(vec(key.strides[uid]))
                      .set_data_type(fe::DataType_t::FLOAT));
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
  const int64_t B = key.B, T = key.T, H = key.H, Hkv = key.Hkv;
  auto Q = bf16_tensor(*g, key, "Q", kQ, T, H);
  auto K = bf16_tensor(*g, key, "K", kK, T, Hkv);
  auto V = bf16_tensor(*g, key, "V", kV, T, Hkv);
  std::shared_ptr<fe::graph::Tensor_attributes> sink;
  if (key.sink) sink = f32_tensor(*g, key, "sink", kSink, {1, H, 1, 1});
  auto output = [&](const std::shared_ptr<fe::graph::Tensor_attributes>& t, Uid uid, int64_t heads) {
    t->set_output(true).set_uid(uid).set_dim(bshd_dims(B, T, heads, key.dh)).set_stride(vec(key.strides[uid]));
  };
  if (!key.backward) {
    fe::graph::SDPA_attributes a;
    a.set_name("sdpa").set_generate_stats(true).set_attn_scale(scale);
    set_mask(a, key);
    if (sink) a.set_sink_token(sink);
    auto [O, Stats] = g->sdpa(Q, K, V, a);
    output(O, kO, H);
    Stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({B, H, T, 1}).set_stride(
        vec(key.strides[kStats]));
  } else {
    auto O = bf16_tensor(*g, key, "O", kO, T, H);
    auto dO = bf16_tensor(*g, key, "dO", kdO, T, H);
    auto Stats = f32_tensor(*g, key, "Stats", kStats, {B, H, T, 1});
    fe::graph::SDPA_backward_attributes a;
    a.set_name("sdpa_backward").set_attn_scale(scale).set_deterministic_algorithm(key.deterministic);
    set_mask(a, key);
    if (sink) a.set_sink_token(sink).set_dsink_token(f32_tensor(*g, key, "dSink", kdSink, {1, H, 1, 1}));
    auto [dQ, dK, dV] = g->sdpa_backward(Q, K, V, O, dO, Stats, a);
    output(dQ, kdQ, H);
    output(dK, kdK, Hkv);
    output(dV, kdV, Hkv);
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

// One call's tensors as cuDNN sees them, by uid: the op's own tensor where cuDNN can take it in place (bf16
// [B,L,heads,dh] views; f32 stats [B,H,T] and sink [H] when contiguous), else a contiguous scratch array in
// cuDNN's type, copied in before (inputs) or out after (outputs) the execution. The scratch (one slot, each
// array 256-byte aligned, cuDNN's workspace last) is laid out by one walk that both measures (base null) and
// places, so the size and the views cannot disagree.
struct Binding {
  std::array<Tensor, kUids> op;       // the op's tensor (undefined: none, e.g. d_q not asked for)
  std::array<Tensor, kUids> scratch;  // defined where the op's tensor is not taken in place
  std::array<bool, kUids> used{};
  void* workspace = nullptr;
  Tensor bound(Uid u) const { return scratch[u].defined() ? scratch[u] : op[u]; }
};

// Whether cuDNN takes the op's tensor t for uid u as it is: bf16 [B,L,heads,dh] views whose rows and heads are
// 16-byte aligned (cuDNN's kernels load 16 bytes at a time), contiguous f32 stats and sink.
bool in_place(const Tensor& t, Uid u) {
  if (!t.defined()) return false;
  if (u == kStats) return t.is_contiguous();
  if (u == kSink || u == kdSink) return t.stride[0] == 1 || t.shape[0] == 1;
  return t.dtype == DType::bf16 && reinterpret_cast<uintptr_t>(t.data) % 16 == 0 && t.stride[0] % 8 == 0 &&
         t.stride[1] % 8 == 0 && t.stride[2] % 8 == 0;
}

size_t carve(char* base, const AttentionDims& d, Device device, Binding* b) {
  size_t at = 0;
  for (int u = kQ; u < kUids; ++u) {
    if (!b->used[size_t(u)] || in_place(b->op[size_t(u)], Uid(u))) continue;
    const bool f32 = u == kStats || u == kSink || u == kdSink;
    const bool kv = u == kK || u == kV || u == kdK || u == kdV;
    int64_t dims[4] = {d.B, d.T, kv ? d.Hkv : d.H, d.dh};
    int n = 4;
    if (u == kStats) dims[1] = d.H, dims[2] = d.T, n = 3;
    if (u == kSink || u == kdSink) dims[0] = d.H, n = 1;
    int64_t numel = 1;
    for (int i = 0; i < n; ++i) numel *= dims[i];
    const DType dt = f32 ? DType::f32 : DType::bf16;
    b->scratch[size_t(u)] = base ? Tensor::contiguous_view(base + at, dt, dims, n, device) : Tensor{};
    at += (size_t(numel) * size_t(dtype_size(dt)) + 255) / 256 * 256;
  }
  b->workspace = base ? base + at : nullptr;
  return at;
}

// The strides cuDNN sees for uid u (the op's tensor in place, else contiguous scratch).
Strides strides_of(const Binding& b, const AttentionDims& d, Uid u) {
  const Tensor& t = b.op[u];
  const bool scratch = !in_place(t, u);
  if (u == kStats) return scratch ? Strides{d.H * d.T, d.T, 1, 1} : Strides{t.stride[0], t.stride[1], t.stride[2], 1};
  if (u == kSink || u == kdSink) return {d.H, 1, 1, 1};
  if (!scratch) return bshd(t.stride[0], t.stride[1], t.stride[2], t.stride[3]);
  const int64_t heads = (u == kK || u == kV || u == kdK || u == kdV) ? d.Hkv : d.H;
  return bshd(d.T * heads * d.dh, heads * d.dh, d.dh, 1);
}

// Builds (or finds) the call's graph, carves its scratch, copies in the inputs that are not bound in place,
// executes the graph.
void prepare_and_execute(CudaBackend& be, CudnnContext& ctx, GraphKey key, const AttentionDims& d,
                                           Binding& b, const std::initializer_list<Uid>& inputs) {
  for (int u = kQ; u < kUids; ++u)
    if (b.used[size_t(u)]) key.strides[size_t(u)] = strides_of(b, d, Uid(u));
  const CachedGraph& cg = graph_for(ctx, key);
  const Device device = b.op[kQ].device;
  const size_t bytes = carve(nullptr, d, device, &b) + size_t(cg.workspace_bytes);
  carve(static_cast<char*>(be.scratch(CudaBackend::ScratchSlot::attention_fast, bytes)), d, device, &b);
  for (Uid u : inputs)
    if (b.used[u] && b.scratch[u].defined()) be.copy(b.scratch[u], b.op[u]);
  std::unordered_map<int64_t, void*> pack;
  for (int u = kQ; u < kUids; ++u)
    if (b.used[size_t(u)]) pack[u] = b.bound(Uid(u)).data;
  fe_check(cg.graph->execute(ctx.handle, pack, b.workspace), key.backward ? "backward" : "forward");
}

// Copies the outputs cuDNN wrote into scratch to the op's tensors (those that are defined).
void finish(CudaBackend& be, const Binding& b, const std::initializer_list<Uid>& outputs) {
  for (Uid u : outputs)
    if (b.used[u] && b.scratch[u].defined() && b.op[u].defined()) be.copy(b.op[u], b.scratch[u]);
}

void bind(Binding& b, Uid u, const Tensor& t) {
  b.op[u] = t;
  b.used[u] = true;
}

}  // namespace

// out [B,T,H,dh], stats [B,H,T] (optional) from q [B,T,H,dh], k/v [B,T,Hkv,dh] (no lead keys: S = T).
void cudnn_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                             const ops::AttentionSpec& spec, const AttentionDims& d) {
  if (d.B * d.H * d.T == 0) return;
  DeviceGuard guard(be.index());
  CudnnContext& ctx = be.cudnn_context();
  Binding b;
  bind(b, kQ, q);
  bind(b, kK, k);
  bind(b, kV, v);
  bind(b, kO, out);
  bind(b, kStats, stats);
  if (spec.sink_logit.defined()) bind(b, kSink, spec.sink_logit);
  prepare_and_execute(be, ctx, key_of(d, spec, false), d, b, {kQ, kK, kV, kSink});
  finish(be, b, {kO, kStats});
}

// d_q, d_k, d_v (each optional, written), spec.d_sink_logit (optional, written) from d_out, q, k, v,
// out and stats. cuDNN's dSink is dL/dS itself (see the top).
void cudnn_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                              Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                              const AttentionDims& d) {
  if (d.B * d.H * d.T == 0) return;
  DeviceGuard guard(be.index());
  CudnnContext& ctx = be.cudnn_context();
  Binding b;
  for (const auto& [u, t] : {std::pair<Uid, const Tensor*>{kQ, &q}, {kK, &k}, {kV, &v}, {kO, &out}, {kdO, &d_out},
                             {kStats, &stats}, {kdQ, &d_q}, {kdK, &d_k}, {kdV, &d_v}})
    bind(b, u, *t);
  if (spec.sink_logit.defined()) {
    bind(b, kSink, spec.sink_logit);
    bind(b, kdSink, spec.d_sink_logit);
  }
  prepare_and_execute(be, ctx, key_of(d, spec, true), d, b, {kQ, kK, kV, kO, kdO, kStats, kSink});
  finish(be, b, {kdQ, kdK, kdV, kdSink});
}

}  // namespace sinklab::cuda
