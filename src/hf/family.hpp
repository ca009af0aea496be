// Pieces the family files share: the base class holding a model's info, weights and sizes, with the set-up
// and forward steps every family takes (the block activations of one batch shape, q/k/v per head, the
// attention under the survey's ablations, the end of a layer, the final norm and head), argument checks,
// learned positions with the Table 7 interventions, the token table and head of a plan, Llama's gated MLP,
// and the config.json readers of sizes, activations and rotary embeddings.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "hf/checkpoint.hpp"
#include "hf/hf_model.hpp"
#include "hf/registry.hpp"

namespace sinklab::hf {

// Per-head view [B,T,heads,dh] of columns [col, col + heads*dh) of a [B*T, width] matrix.
Tensor head_view(Tensor m, int64_t batch, int64_t seq, int64_t col, int64_t heads, int64_t dh);

// The activations of one forward shape, carved out of one buffer (64-byte aligned). A family lists
// its tensors as slots; bytes() is what the --max-memory check counts.
class Activations {
 public:
  struct Slot {
    Tensor* tensor;
    std::vector<int64_t> dims;  // f32
  };
  static int64_t bytes(const std::vector<Slot>& slots);
  // Points every slot's tensor into the buffer on `device` (grown when too small, kept otherwise).
  void allocate(const std::vector<Slot>& slots, Device device);

 private:
  Buffer buffer_;
};

// The attention geometry of a config, checked as every family needs it: width d_model and query heads
// (required positive integers under the first present of width_keys / head_keys; GPT-2 spells them
// n_embd, n_head), key/value heads and head size. With grouped_query (Llama-style configs) kv_heads is
// num_key_value_heads (default: heads, which must be a multiple of it) and head_dim the config's head_dim
// (default: d_model / heads); otherwise kv_heads = heads and head_dim = d_model / heads. Where head_dim
// comes from d_model / heads, d_model must be a multiple of heads.
struct HeadShape {
  int64_t d_model = 0, heads = 0, kv_heads = 0, head_dim = 0;
};
HeadShape head_shape(const HfConfig& cfg, bool grouped_query,
                     std::initializer_list<const char*> width_keys = {"hidden_size"},
                     std::initializer_list<const char*> head_keys = {"num_attention_heads"});

// A family model: info, weights, sizes, the activations of the last batch shape, and the steps of set-up
// and forward every family shares. A family file is then its config reading, its tensor-name table and
// its forward (gpt2.cpp is the plainest example):
//   constructor: set_sizes(head_shape(cfg, ...), MLP width), eps_, act_; plan = token_plan(...), then
//                plan.resident and plan.layers (the tensor-name table); load_weights(source, plan, options)
//   forward:     begin_forward; ensure_activations(B, T, norm, the family's own slots); per layer l from
//                stream(l) to stream(l + 1): the norm and q|k|v projection into qkv_, qkv_heads, attend,
//                the output projection and MLP, end_layer; final_logits (or write_logits)
class FamilyModel : public HfModel {
 public:
  const HfModelInfo& info() const override { return info_; }

 protected:
  // ---- Set-up (the constructor).
  // The sizes every family has (d_, H_, Hkv_, dh_, F_): the config's head shape and the MLP's hidden width.
  void set_sizes(const HeadShape& shape, int64_t mlp_width);
  // The WeightStore of `plan` (every tensor checked now, so a broken checkpoint fails at load) and the
  // fields of info_ every family fills the same way (attention in every layer, no learned positions); a
  // family then sets what is its own.
  void load_weights(const ModelSource& source, WeightPlan plan, const LoadOptions& options);

  // ---- The forward.
  // Checks forward()'s arguments (ids i32 [B,T] on the host; logits f32 [B,T,V], contiguous, when
  // defined) and the position interventions; returns true when logits are to be written.
  bool begin_forward(Tensor ids, Tensor logits, const ForwardOptions& opt) const;
  // The block activations below plus the family's own `extra` slots, for a batch of B x T rows (checked
  // against --max-memory), when the batch shape differs from the last one. LayerNorm families keep a mean
  // per row as well.
  enum class Norm { rms, layer };
  void ensure_activations(int64_t batch, int64_t seq, Norm norm, std::vector<Activations::Slot> extra = {});
  // The residual stream entering layer l: res_ alternates, stream(l + 1) is layer l's output and
  // stream(n_layers) the last one's.
  Tensor stream(int layer) const { return res_[layer % 2]; }
  // q, k and v per head [B,T,heads,dh] of the fused projection qkv_: H query heads, then Hkv key and Hkv
  // value heads (GPT-NeoX, whose q|k|v interleave per head, makes its own).
  struct Heads {
    Tensor q, k, v;
  };
  Heads qkv_heads(int64_t batch, int64_t seq) const;
  // att_ = the attention of layer `layer` over h (attention() below), q and k rotated in place first when
  // rope is given; returns the probabilities the observer asked for (undefined without one).
  Tensor attend(const Heads& h, const ops::AttentionSpec& spec, const ops::RopeConfig* rope, int layer,
                const ForwardOptions& opt, LayerObserver* observer);
  // x [B*T, d] += table[p], p the learned positions of every row plus `offset` (learned_positions: the
  // Table 7 interventions applied); tmp_ is the scratch.
  void add_learned_positions(Tensor x, Tensor table, int64_t batch, int64_t seq, const ForwardOptions& opt,
                             int32_t offset);
  // logits f32 [B,T,V] on the host = x [B*T, d_head] times the head.
  void write_logits(Tensor logits, Tensor x);
  // write_logits of the final norm (weight, bias: undefined for RMSNorm or none) of stream(n_layers), in xn_.
  void final_logits(Tensor logits, Norm norm, Tensor weight, Tensor bias = Tensor{});

  // The end of layer `layer`, whose output is stream(layer + 1): opt.hidden_ablation on the output, then the
  // layer's taps to the observer, if any (pre_norm: a post-LN layer's residual sum before its last norm).
  void end_layer(int layer, const Heads& h, const ops::AttentionSpec& spec, Tensor probs, const ForwardOptions& opt,
                 LayerObserver* observer, Tensor pre_norm = Tensor{});
  // ops::attention_forward of layer `layer` under opt.attention_ablation (ablations.cpp): the same call
  // without one. q, k rotated (rope: the family's rotary config, for StreamingLLM's position
  // re-assignment) or not (rope nullptr). probs is passed on only without an ablation (an ablated
  // forward measures the loss; the probe's matrix would not be the one the model used).
  void attention(Tensor out, Tensor q, Tensor k, Tensor v, const ops::AttentionSpec& spec, int layer,
                 const ForwardOptions& opt, const ops::RopeConfig* rope, Tensor probs);
  // opt.hidden_ablation on the block output x [B*T, d] of layer `layer` (nothing at other layers).
  void ablate_hidden(Tensor x, int64_t batch, int64_t seq, int layer, const ForwardOptions& opt);

  // A small host-made input of the forward (positions, expert row lists) where the model runs: `host`
  // itself on the CPU, else a copy in `slot` (a device buffer kept for the next batch).
  Tensor on_device(Buffer& slot, Tensor host) const { return staged_copy(slot, host, store_->device()); }
  // A host copy of a device tensor in `slot` (the tensor itself on the CPU): for the few host-side steps
  // of an ablation.
  static Tensor on_host(Buffer& slot, Tensor t) { return staged_copy(slot, t, Device::cpu()); }

  HfModelInfo info_;
  std::unique_ptr<WeightStore> store_;
  int64_t d_ = 0, H_ = 0, Hkv_ = 0, dh_ = 0, F_ = 0;  // width, query heads, key/value heads, head size, MLP width
  double eps_ = 1e-5;                                  // the norms' epsilon
  ops::Activation act_ = ops::Activation::gelu_exact;  // the MLP's activation (the config's; set by the family)
  // The block activations every family uses (ensure_activations), N = B*T rows: the residual stream (two
  // buffers, layers alternate: stream()), the residual between a layer's two blocks, a normed input and its
  // statistics (mean_: LayerNorm only), the fused q|k|v [N, (H + 2 Hkv) dh], the attention's output
  // [N, H dh], a block's output [N, d], the MLP's hidden [N, F].
  Tensor res_[2], mid_, xn_, mean_, rstd_, qkv_, att_, tmp_, ffn_;

 private:
  Activations acts_;
  int64_t acts_batch_ = 0, acts_seq_ = 0;
  Buffer ablation_scratch_;  // stats and re-rotated queries of window_sinks
  std::array<Buffer, 6> ablation_host_;  // a GPU model's host copies for the ablations' host steps
  Buffer ablation_device_;               // a GPU model's window_sinks statistics
  Buffer positions_buffer_;              // a GPU model's position ids (learned positions)
};


// Position ids 0..T-1 of every row of a [B,T] batch (flattened, [B*T]) plus `offset`, with the
// Table 7 interventions applied to each row: p_1 := p_t (replace) or p_1 <-> p_t (swap).
std::vector<int32_t> learned_positions(int64_t batch, int64_t seq, const ForwardOptions& opt, int32_t offset);

// An HF activation name (config "activation_function" / "hidden_act") as an op activation.
ops::Activation activation_from_config(const HfConfig& cfg, const std::string& key, const std::string& fallback);

// Rotary embedding of a config: theta and partial rotary from rope_parameters (transformers >= 5) or
// from the older top-level keys (theta_key, partial_key) plus rope_scaling; rope types default and
// llama3 (anything else is an unsupported switch).
struct RopeKeys {
  const char* theta_key = "rope_theta";
  double theta_default = 10000.0;
  const char* partial_key = "partial_rotary_factor";
  double partial_default = 1.0;
};
ops::RopeConfig rope_from_config(const HfConfig& cfg, int64_t head_dim, const RopeKeys& keys);

// The tensor-name prefix of a checkpoint: the first of `prefixes` under which `probe` exists
// (transformers' save_pretrained writes "transformer.wte.weight", the original GPT-2 upload "wte.weight").
// None: "<source>: missing tensor '<prefixes[0]><probe>'".
std::string find_prefix(const Checkpoint& ckpt, std::initializer_list<const char*> prefixes, const std::string& probe);

// The token table and the output head of a plan. embedding: the table's name, [vocab_size, d_embed]
// (checked now: a wrong width fails at load naming the tensor); head: the same table when
// tie_word_embeddings (absent: tied_by_default), else the first of head_names the checkpoint holds (none:
// the last, whose absence WeightStore then names).
WeightPlan token_plan(const HfConfig& cfg, const Checkpoint& ckpt, const std::string& embedding, int64_t d_embed,
                      bool tied_by_default, std::initializer_list<const char*> head_names = {"lm_head.weight"});

// Llama's gate and up projections as one stacked tensor (one GEMM; the halves of its output are the gate
// and the up), from <mlp>gate_proj.<what> and <mlp>up_proj.<what>: what = "weight" gives [2F, d_in],
// "bias" [2F].
WeightSpec stacked_gate_up(const std::string& mlp, const std::string& what, int64_t mlp_width, int64_t d_in);

// Llama's MLP: out = (act(x Wg + bg) * (x Wu + bu)) Wd + bd, gate_up_w / gate_up_b stacked
// (stacked_gate_up; biases may be undefined). Scratch: gate_up [rows, 2F] and hidden [rows, F].
void gated_mlp(Tensor out, Tensor x, Tensor gate_up_w, Tensor gate_up_b, Tensor down_w, Tensor down_b,
               ops::Activation act, Tensor gate_up, Tensor hidden);

// A required positive integer field (the first present of several spellings).
int64_t positive_int(const HfConfig& cfg, std::initializer_list<const char*> keys);



}  // namespace sinklab::hf
