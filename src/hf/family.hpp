// Pieces the family files share: the base class holding a model's info and weights, the activation
// arena of one batch shape, argument checks, learned positions with the Table 7 interventions, and
// the config.json readers of activations and rotary embeddings.
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

// A family model: info, weights, the activations of the last batch shape.
class FamilyModel : public HfModel {
 public:
  const HfModelInfo& info() const override { return info_; }

 protected:
  // Checks forward()'s arguments (ids i32 [B,T] on the host; logits f32 [B,T,V], contiguous, when
  // defined) and the position interventions; returns true when logits are to be written.
  bool begin_forward(Tensor ids, Tensor logits, const ForwardOptions& opt) const;
  // Allocates the slots for a batch of B x T after checking them against --max-memory.
  void allocate_activations(int64_t batch, int64_t seq, const std::vector<Activations::Slot>& slots);

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

// A required positive integer field (the first present of several spellings).
int64_t positive_int(const HfConfig& cfg, std::initializer_list<const char*> keys);

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

// Fills the info fields every family sets the same way, from the store and the config's head shape.
void fill_common_info(HfModelInfo& info, const ModelSource& source, const WeightStore& store, const HeadShape& shape,
                      const LoadOptions& options);

}  // namespace sinklab::hf
