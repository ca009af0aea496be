// The cuDNN SDPA stand-in of the CPU emulation (tests/gpu/emu; shadow headers cudnn.h, cudnn_frontend.h):
// the subset of cudnn-frontend's graph API that src/backend/cuda/attention_cudnn.cpp calls, computing on
// the host what the graph describes. Each tensor is read and written through its own dims and strides
// (elements; logical dims [b, h, s, d], Stats [b, h, s, 1], the sink [1, h, 1, 1]) in its data type (the
// graph's io type, bf16, unless set), so a wrong stride or dim in the graph fails here. The semantics, from
// cudnn-frontend's documentation and source (node/scaled_dot_product_flash_attention.h,
// utils/attn_score_modifiers.h, cudnn_frontend_utils.h):
//   - S = attn_scale Q K^T per (b, h), query head h reading key/value head h / (h_q / h_kv);
//   - masks with TOP_LEFT alignment: the right bound r keeps col <= row + r (causal: r = 0), the left bound
//     w keeps col + w > row; ALiBi adds slope_h (col - row), slope_h = get_alibi_slope(h_q)[h];
//   - softmax in f32 (here double) with the sink token's logit in the row sum; Stats = max + log(sum)
//     (natural log); O in the io type;
//   - backward from the given O, dO, Stats: P = exp(S - Stats), D = rowsum(dO * O), dS = P (dO V^T - D),
//     dQ = scale dS K, dK = scale dS^T Q, dV = P^T dO (summed over a key/value head's query heads),
//     dSink_h = -sum over b, i of exp(sink_h - Stats) D: the loss gradient, as cuDNN 9.14 gave it on an
//     H200 (2026-11-28; the first stand-in had the opposite sign, read from the frontend's graph). A sink
//     token with s_q == 1 is refused, as the library refuses it ("decode only mode").
// validate() checks what the frontend's validation does for these graphs (4-D tensors with dims and strides,
// consistent b / h / s / d, h_q a multiple of h_kv, d a multiple of 8 and <= 128, a contiguous d, unique
// uids); execute() checks that every bound tensor lies inside one device allocation.
// What it cannot tell: cuDNN's kernels' numbers (its f32 softmax and bf16 rounding order), which
// configurations the loaded cuDNN supports, and whether the frontend's semantics above are what the
// library does: the stand-in is read from the frontend's source, as attention_cudnn.cpp was.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda_emu.hpp"

// ---- cudnn.h ---------------------------------------------------------------------------------------------
enum cudnnStatus_t { CUDNN_STATUS_SUCCESS = 0, CUDNN_STATUS_BAD_PARAM = 2000, CUDNN_STATUS_NOT_SUPPORTED = 3000 };
struct cudnnContext;
using cudnnHandle_t = cudnnContext*;
cudnnStatus_t cudnnCreate(cudnnHandle_t* h);
cudnnStatus_t cudnnDestroy(cudnnHandle_t h);
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t s);
size_t cudnnGetVersion();
const char* cudnnGetErrorString(cudnnStatus_t s);

// ---- cudnn_frontend.h --------------------------------------------------------------------------------------
namespace cudnn_frontend {

enum class error_code_t { OK, ATTRIBUTE_NOT_SET, INVALID_VALUE, GRAPH_NOT_SUPPORTED, GRAPH_EXECUTION_FAILED };
struct error_t {
  error_code_t code = error_code_t::OK;
  std::string err_msg;
  error_t() = default;
  error_t(error_code_t c, std::string m) : code(c), err_msg(std::move(m)) {}
  bool is_good() const { return code == error_code_t::OK; }
  bool is_bad() const { return !is_good(); }
  const std::string& get_message() const { return err_msg; }
};

enum class DataType_t { NOT_SET, FLOAT, DOUBLE, HALF, BFLOAT16, INT32 };
enum class HeurMode_t { A, B, FALLBACK };
enum class DiagonalAlignment_t { TOP_LEFT, BOTTOM_RIGHT };

namespace graph {

class Tensor_attributes {
 public:
  Tensor_attributes& set_name(const std::string& n) {
    name = n;
    return *this;
  }
  Tensor_attributes& set_uid(int64_t u) {
    uid = u;
    has_uid = true;
    return *this;
  }
  Tensor_attributes& set_dim(const std::vector<int64_t>& d) {
    dim = d;
    return *this;
  }
  Tensor_attributes& set_stride(const std::vector<int64_t>& s) {
    stride = s;
    return *this;
  }
  Tensor_attributes& set_data_type(DataType_t t) {
    data_type = t;
    return *this;
  }
  Tensor_attributes& set_output(bool o) {
    is_output = o;
    return *this;
  }
  std::string name;
  int64_t uid = 0;
  bool has_uid = false;
  std::vector<int64_t> dim, stride;
  DataType_t data_type = DataType_t::NOT_SET;
  bool is_output = false;
};
using Tensor_t = std::shared_ptr<Tensor_attributes>;

// The mask and scale settings both SDPA directions share.
template <class Derived>
class SdpaCommon {
 public:
  Derived& set_name(const std::string& n) {
    name = n;
    return self();
  }
  Derived& set_attn_scale(float s) {
    attn_scale = s;
    return self();
  }
  Derived& set_diagonal_alignment(DiagonalAlignment_t a) {
    alignment = a;
    return self();
  }
  Derived& set_diagonal_band_right_bound(int r) {
    right_bound = r;
    return self();
  }
  Derived& set_diagonal_band_left_bound(int l) {
    left_bound = l;
    return self();
  }
  Derived& set_alibi_mask(bool v) {
    alibi = v;
    return self();
  }
  Derived& set_sink_token(Tensor_t t) {
    sink = std::move(t);
    return self();
  }
  std::string name;
  std::optional<float> attn_scale;
  DiagonalAlignment_t alignment = DiagonalAlignment_t::TOP_LEFT;
  std::optional<int> right_bound, left_bound;
  bool alibi = false;
  Tensor_t sink;

 private:
  Derived& self() { return static_cast<Derived&>(*this); }
};

class SDPA_attributes : public SdpaCommon<SDPA_attributes> {
 public:
  SDPA_attributes& set_generate_stats(bool v) {
    generate_stats = v;
    return *this;
  }
  bool generate_stats = false;
};

class SDPA_backward_attributes : public SdpaCommon<SDPA_backward_attributes> {
 public:
  SDPA_backward_attributes& set_deterministic_algorithm(bool v) {
    deterministic = v;
    return *this;
  }
  SDPA_backward_attributes& set_dsink_token(Tensor_t t) {
    dsink = std::move(t);
    return *this;
  }
  bool deterministic = false;
  Tensor_t dsink;
};

class Graph {
 public:
  Graph& set_io_data_type(DataType_t t) {
    io_type = t;
    return *this;
  }
  Graph& set_intermediate_data_type(DataType_t t) {
    intermediate_type = t;
    return *this;
  }
  Graph& set_compute_data_type(DataType_t t) {
    compute_type = t;
    return *this;
  }
  Tensor_t tensor(const Tensor_attributes& a) {
    auto t = std::make_shared<Tensor_attributes>(a);
    tensors.push_back(t);
    return t;
  }
  std::array<Tensor_t, 2> sdpa(Tensor_t q, Tensor_t k, Tensor_t v, SDPA_attributes a);
  std::array<Tensor_t, 3> sdpa_backward(Tensor_t q, Tensor_t k, Tensor_t v, Tensor_t o, Tensor_t dO, Tensor_t stats,
                                        SDPA_backward_attributes a);
  error_t validate();
  error_t build_operation_graph(cudnnHandle_t h);
  error_t create_execution_plans(const std::vector<HeurMode_t>& modes);
  error_t check_support(cudnnHandle_t h);
  error_t build_plans(cudnnHandle_t h);
  error_t get_workspace_size(int64_t& bytes) const;
  error_t execute(cudnnHandle_t h, std::unordered_map<int64_t, void*>& pack, void* workspace) const;

  DataType_t io_type = DataType_t::NOT_SET, intermediate_type = DataType_t::NOT_SET,
             compute_type = DataType_t::NOT_SET;
  std::vector<Tensor_t> tensors;
  bool backward = false, has_node = false, validated = false, built = false;
  SDPA_attributes fwd;
  SDPA_backward_attributes bwd;
  Tensor_t Q, K, V, O, Stats, dO, dQ, dK, dV;
};

}  // namespace graph
}  // namespace cudnn_frontend
