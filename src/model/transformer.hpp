// The trainable transformer, written once over the op API (backend/ops.hpp): forward, backward and
// the probe's forward with per-layer taps. Parameters and gradients each live in one flat buffer
// laid out by param_layout(), so data-parallel all-reduce and ZeRO-1 sharding see one array.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/layer_taps.hpp"
#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "model/config.hpp"

namespace sinklab::model {

using sinklab::LayerObserver;
using sinklab::LayerTaps;

class Transformer {
 public:
  Transformer(const ModelConfig& cfg, Device device = Device::cpu());

  const ModelConfig& config() const { return cfg_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t num_parameters() const;      // without alignment padding
  Tensor flat_params() const { return flat_params_; }  // [n_elements]
  Tensor flat_grads() const { return flat_grads_; }    // [n_elements]
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;
  const ops::AttentionSpec& attention_spec() const { return attention_; }

  // Philox-seeded initialisation of every parameter (stream = parameter index), zero gradients.
  void init_weights(uint64_t seed);
  void zero_grads();

  // One micro-batch: inputs/targets i32 [B,T] (T <= context; target -1 = not counted). Runs forward and
  // backward, ACCUMULATING grad_scale * d(sum of losses)/d(params) into the gradients; returns the sum
  // of the per-token losses and (via counted) how many targets were counted.
  double forward_backward(Tensor inputs, Tensor targets, double grad_scale, int64_t* counted = nullptr);
  // Forward only: the sum of per-token losses and their count.
  double forward_loss(Tensor inputs, Tensor targets, int64_t* counted = nullptr);
  // Forward only, no loss: calls observer.on_layer for every layer (the sink probe).
  void forward_observe(Tensor inputs, LayerObserver& observer);

 private:
  struct LayerActs {  // what backward needs of layer l, all [N = B*T, ...]
    Tensor x_in, xn1, rstd1, qkv, att, stats, x_mid, xn2, rstd2, gate_up, ffn_h;
  };
  void ensure_activations(int64_t batch, int64_t seq);
  void forward_layers(Tensor inputs, LayerObserver* observer);
  double head_loss(Tensor targets, double grad_scale, bool backward, int64_t* counted);
  void backward_layers(Tensor inputs);
  Tensor weight(int64_t first_param_index, int64_t rows, int64_t cols, bool grad) const;
  Tensor at(size_t param_index, bool grad) const;  // the parameter (or its gradient) in its own shape

  ModelConfig cfg_;
  Device device_;
  std::vector<ParamSpec> specs_;
  std::map<std::string, size_t> index_;
  int64_t n_elements_ = 0;
  Buffer params_buffer_, grads_buffer_;
  Tensor flat_params_, flat_grads_;
  ops::AttentionSpec attention_;
  ops::RopeConfig rope_;

  // Activations for the current (batch, seq) shape.
  int64_t batch_ = 0, seq_ = 0;
  Buffer acts_buffer_;
  std::vector<LayerActs> layers_;
  Tensor x_final_in_, xf_, rstdf_, logits_, losses_;
  Tensor d_res_, d_tmp_, d_xn_, d_qkv_, d_att_, d_gate_up_, d_ffn_h_, d_xf_, tmp_;
  int64_t head_chunk_rows_ = 0;
};

}  // namespace sinklab::model
