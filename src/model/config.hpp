// ModelConfig: the trainable LLaMA-style transformer (pre-norm, RMSNorm, RoPE, SwiGLU, no biases,
// untied head) and the parameter list laid out in one buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sinklab::model {

struct ModelConfig {
  int vocab_size = 0;
  int d_model = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;   // 0 = n_heads (multi-head attention); fewer = grouped-query attention
  int ffn_hidden = 0;   // SwiGLU hidden width
  int context = 0;      // C: training chunk length (inputs per row)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;

  int kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int head_dim() const { return d_model / n_heads; }
  // Throws sinklab::Error naming the offending field.
  void validate() const;
  // HF transformers LlamaConfig JSON, so checkpoints load as a Llama-family model.
  std::string hf_config_json() const;
  // The inverse, for sinklab's own checkpoints (a Llama config.json); `context` from
  // max_position_embeddings. Throws naming `source` for a missing field or another model_type.
  static ModelConfig from_hf_config_json(const std::string& text, const std::string& source);
};

// One parameter: HF Llama tensor name, shape, where it sits in the flat buffer, how it is initialised.
struct ParamSpec {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;   // element offset in the flat buffer (64-byte aligned)
  int64_t numel = 0;
  double init_std = 0;  // normal(0, init_std); 0 with init_one = RMSNorm gain
  bool init_one = false;
  bool decay = true;    // AdamW weight decay applies (2-D matrices); gains do not decay
};

// The parameter list in buffer order. q/k/v of a layer are adjacent (one fused [(H+2Hkv)*dh, d]
// projection) and so are gate/up (one fused [2*ffn, d] projection): the model multiplies each group
// with a single GEMM while the names stay HF's.
//
// Initialisation as the paper's released code (lit_gpt model._init_weights of sail-sg/Attention-Sink):
// every matrix and the embedding normal(0, sqrt(2/(5*fan_in))) — fan_in = d for all but o_proj
// (H*dh, = d) — except the MLP output projection down_proj, normal(0, 1/(sqrt(ffn_hidden)*L)); RMSNorm
// gains 1. (The attention output projection keeps the fan-in scheme: the code rescales only the MLP's.)
std::vector<ParamSpec> param_layout(const ModelConfig& cfg, int64_t* total_elements);

}  // namespace sinklab::model
