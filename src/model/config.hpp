// ModelConfig: the trainable transformer. The default is the paper's LLaMA-style model (pre-norm,
// RMSNorm, RoPE, SwiGLU, no biases, untied head, softmax attention); every other value of a variant
// axis (paper Secs. 6-7, Appendix C, and the sink-free designs after it) is one field here, one row of
// the axis table in config.cpp (flag, values, help, how it reads and writes) and one case in
// transformer.cpp. The parameter list is laid out in one buffer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/ops.hpp"

namespace sinklab::model {

// Positional embedding (Sec. 7.1, Table 3, App. A).
enum class PosEmb : uint8_t { rope, none, sinusoidal, learned, relative, alibi };
// Relative PE: a learned per-head bias per bucket (T5), or the bucket index itself as the bias (the
// paper's Eq. 6 as its released code computes it).
enum class RelativeBias : uint8_t { learned, bucket_index };
// Where the norms sit (Sec. 7.2): pre-norm x + f(LN(x)), post-norm LN(x + f(x)) (Eq. 3).
enum class NormPlacement : uint8_t { pre, post };
enum class NormType : uint8_t { rms, layer };
// The starting values of the weight matrices (not the embeddings): lit_gpt's normal(0, sqrt(2/(5 fan_in)))
// with down_proj normal(0, 1/(sqrt(F) L)) (the paper's released code), or PyTorch's nn.Linear default,
// uniform(+-1/sqrt(fan_in)) for every matrix (Guo et al.'s Bigram-Backcopy models).
enum class MatrixInit : uint8_t { lit_gpt, torch_linear };
// FFN (Table 11): gated (act(x W_gate) * x W_up) W_down, or act(x W_up) W_down.
enum class FfnKind : uint8_t { swiglu, geglu, reglu, relu, gelu, swish };
// Multi-head output (Table 12 left): Concat_h(o_h) W_O, or (sum_h o_h) W_O with W_O [d, dh].
enum class HeadCombine : uint8_t { concat, add };
// Attention biases (Sec. 7.3, Tables 4, 5, 12 right, 13).
enum class AttnBias : uint8_t {
  none,
  sink_token,  // a learnable token x* prepended to every chunk
  kv,          // learnable k*, v*: an extra key/value every query sees
  k,           // learnable k*, fixed v* (0, or m*v' / m*v'' — FixedValue)
  v,           // learnable v* added to every head's output
};
enum class FixedValue : uint8_t { zero, e1, ones };  // v* = 0, m*[1,0,..,0], m*[1,..,1]/sqrt(dh)
// Kernel feature map phi applied to q and k before the dot product (Table 15).
enum class QkKernel : uint8_t { identity, elu_plus_one, mlp };
// Gated attention (Qwen 2025): o_h *= sigmoid(x W_g), one gate per head or per output element.
enum class AttnGate : uint8_t { none, headwise, elementwise };

struct ModelConfig {
  int vocab_size = 0;
  int d_model = 0;
  int n_layers = 0;
  int n_heads = 0;
  int n_kv_heads = 0;   // 0 = n_heads (multi-head attention); fewer = grouped-query attention
  int ffn_hidden = 0;   // FFN hidden width
  int context = 0;      // C: training chunk length (inputs per row)
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;

  // Variant axes (defaults = the paper's default model).
  PosEmb pos_emb = PosEmb::rope;
  RelativeBias relative_bias = RelativeBias::learned;
  int relative_buckets = 32;
  int relative_max_distance = 128;
  NormPlacement norm_placement = NormPlacement::pre;
  NormType norm_type = NormType::rms;  // layer: LayerNorm with a bias (GPT-2, Guo et al.'s BBM models)
  FfnKind ffn = FfnKind::swiglu;
  HeadCombine head_combine = HeadCombine::concat;
  AttnBias attn_bias = AttnBias::none;
  bool bias_per_head = true;      // kv/k/v biases: one per head (false: shared by the heads of a layer)
  int k_bias_dims = 0;            // d_a: learnable leading dims of k* (0 = all dh; the rest are 0)
  FixedValue fixed_value = FixedValue::zero;  // attn_bias k: the fixed v*
  double fixed_value_scale = 1.0;             // m
  ops::AttnSim attn_sim = ops::AttnSim::exp;
  ops::AttnNorm attn_norm = ops::AttnNorm::sum;
  QkKernel qk_kernel = QkKernel::identity;
  double attn_alpha = 1.0;        // norm sum: rows of P sum to alpha (Table 14 left)
  double attn_p = 1.0;            // norm p_norm: p (Eq. 43-44)
  double sigmoid_bias = 0.0;      // sim sigmoid: b in sigmoid(s + b)
  bool sigmoid_bias_log_n = false;  // b = -log(context) (FlashSigmoid); overrides sigmoid_bias
  bool sink_logit = false;        // learned per-head sink logit in the normaliser (gpt-oss)
  double sink_logit_init = 0.0;   // the sink logits' starting value (gpt-oss: 0; log(context) outweighs a row)
  bool softmax_plus_one = false;  // a constant sink logit 0: Z = 1 + sum e^s
  AttnGate attn_gate = AttnGate::none;
  int attn_window = 0;            // > 0: sliding-window attention over this many keys (Sec. 6)
  int prefix_length = 1;          // > 1: prefix LM, bidirectional over the first p tokens, loss after them
  // > 0: the token (and learned position) embeddings start from normal(0, this) instead of the fan-in std,
  // e.g. 1 = PyTorch's nn.Embedding, as in Guo et al.'s Bigram-Backcopy models. Only the starting point.
  double embed_init_std = 0.0;
  MatrixInit matrix_init = MatrixInit::lit_gpt;  // only the starting point, like embed_init_std

  int kv_heads() const { return n_kv_heads > 0 ? n_kv_heads : n_heads; }
  int head_dim() const { return d_model / n_heads; }
  // Positions of the sequence the model runs on: the chunk plus a learnable sink token.
  int lead_positions() const { return attn_bias == AttnBias::sink_token ? 1 : 0; }
  // Keys every query sees before the sequence's own keys (kv / k biases).
  int lead_keys() const { return attn_bias == AttnBias::kv || attn_bias == AttnBias::k ? 1 : 0; }
  bool gated_ffn() const { return ffn == FfnKind::swiglu || ffn == FfnKind::geglu || ffn == FfnKind::reglu; }
  ops::Activation ffn_activation() const;
  // The attention operation of every layer (without its per-layer tensors).
  ops::AttentionSpec attention_spec() const;
  // Throws sinklab::Error naming the offending flag (invalid values and combinations).
  void validate() const;
  // HF transformers LlamaConfig JSON (the default model loads as a Llama-family model); the variant
  // axes are kept under "sinklab" with their flag names.
  std::string hf_config_json() const;
  // The inverse, for sinklab's own checkpoints; `context` from max_position_embeddings. Throws naming
  // `source` for a missing field or another model_type.
  static ModelConfig from_hf_config_json(const std::string& text, const std::string& source);
  // Sets a variant axis from its flag name and text value ("pos-emb", "alibi"); throws naming the flag.
  void set_axis(const std::string& flag, const std::string& value);
  // Every variant axis as (flag name, text value), in a fixed order.
  std::vector<std::pair<std::string, std::string>> axes() const;
  // The whole model as (flag name, text value): the shape flags (vocab-size ... norm-eps, n-kv-heads
  // resolved), then axes(). Two configs with equal settings build the same model; a resumed run must
  // match its checkpoint in every one.
  std::vector<std::pair<std::string, std::string>> settings() const;
  // The --help line of a variant axis ("" for another flag).
  static const char* axis_help(const std::string& flag);
};

// What a parameter is to the model: Transformer::index_parameters finds its tensors by role, so a name
// is spelled once, in param_layout.
enum class ParamRole : uint8_t {
  embed_tokens, embed_positions, sink_token, relative_bias,  // before the layers
  norm1, norm1_bias, q, k, v, kernel_mlp1, kernel_mlp2, k_bias, v_bias, sinks, attn_gate, o,  // a layer's
  norm2, norm2_bias, ffn_gate, ffn_up, ffn_down,
  final_norm, final_norm_bias, head,  // after them
};
// The tensors a learned sink lives in (the sink token x*, k*, v*, the sink logits S_h): --sink-lr-scale's.
constexpr bool is_sink_parameter(ParamRole role) {
  return role == ParamRole::sink_token || role == ParamRole::k_bias || role == ParamRole::v_bias ||
         role == ParamRole::sinks;
}

// One parameter: tensor name (HF Llama names where Llama has the tensor), shape, where it sits in the
// flat buffer, how it is initialised.
struct ParamSpec {
  std::string name;
  ParamRole role = ParamRole::embed_tokens;
  int layer = -1;       // the layer it belongs to ("model.layers.<l>.*"), -1 for the others
  std::vector<int64_t> shape;
  int64_t offset = 0;   // element offset in the flat buffer (64-byte aligned)
  int64_t numel = 0;
  double init_std = 0;  // normal(0, init_std); 0 without init_one = zeros
  double init_uniform_bound = 0;  // > 0: uniform(-bound, bound) instead (matrix-init torch-linear)
  bool init_one = false;
  double init_value = 0;  // init_std 0 without init_one: every element starts at this constant
  bool decay = true;    // AdamW weight decay applies (matrices); gains, biases, sink logits/token do not
};

// The parameter list in buffer order. q/k/v of a layer are adjacent (one fused [(H+2Hkv)*dh, d]
// projection) and so are gate/up (one fused [2*ffn, d] projection): the model multiplies each group
// with a single GEMM while the names stay HF's.
//
// Initialisation as the paper's released code (lit_gpt model._init_weights of sail-sg/Attention-Sink):
// every matrix and the embedding normal(0, sqrt(2/(5*fan_in))), except the MLP output projection
// down_proj, normal(0, 1/(sqrt(ffn_hidden)*L)); RMSNorm gains 1; k*/v* biases normal(0, 0.02) (its
// model_kv_bias.py); sink logits --sink-logit-init (0 by default) and learned relative biases 0. matrix-init torch-linear draws every
// matrix but the embeddings uniform(+-1/sqrt(fan_in)) instead (ParamSpec::init_uniform_bound).
//
// Variant tensors: model.embed_positions.weight [C+lead, d] (learned PE), model.sink_token [d],
// model.relative_attention_bias.weight [H, buckets] (shared by all layers, as T5), and per layer
// self_attn.{k_bias [H|1, d_a], v_bias [H|1, dh], sinks [H], gate_proj.weight [H or H*dh, d],
// kernel_mlp1.weight / kernel_mlp2.weight [dh, dh]}; non-gated FFNs have mlp.up_proj/down_proj only;
// post-norm models have no model.norm.
std::vector<ParamSpec> param_layout(const ModelConfig& cfg, int64_t* total_elements);

// Counts over a layout (Transformer's, and sinklab-pretrain --describe's without building a model): every
// parameter (no padding); without the word embedding and the unembedding (the paper's count, Sec. 4); the
// training FLOPs per token at sequence length seq (Transformer::flops_per_token says how they are counted).
int64_t count_parameters(const std::vector<ParamSpec>& specs);
int64_t count_parameters_non_embedding(const std::vector<ParamSpec>& specs);
double flops_per_token(const ModelConfig& cfg, const std::vector<ParamSpec>& specs, int64_t seq);

}  // namespace sinklab::model
