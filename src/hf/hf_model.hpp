// Pretrained Hugging Face models (the survey's model side, paper Sec. 3-5): one family per file
// (gpt2.cpp, gpt_neox.cpp, opt.cpp, llama.cpp, qwen2.cpp, gemma3.cpp, jamba.cpp), each a tensor-name table
// plus a forward written over the op API, reporting every layer to a LayerObserver exactly as the trainable
// model does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.hpp"
#include "model/layer_taps.hpp"

namespace sinklab::hf {

struct HfModelInfo {
  std::string model_type;      // config.json "model_type": gpt2 | gpt_neox | opt | llama | mistral | qwen2 |
                               // gemma3_text | jamba
  std::string dir;             // the model directory
  std::string weights;         // the file the weights were read from: model.safetensors,
                               // model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, d_model = 0, vocab_size = 0;
  int64_t max_positions = 0;   // longest sequence the model accepts (learned positions) or 0 = unbounded
  bool learned_positions = false;  // GPT-2 / OPT: the position interventions of Table 7 apply
  std::vector<int> attention_layers;  // indices of layers that have attention (Jamba: a subset)
  int64_t weight_bytes = 0;    // all weights as f32
  int64_t n_params = 0;        // parameters (a tied head once); n_params_non_embedding without the token
  int64_t n_params_non_embedding = 0;  // embedding and the head (learned positions stay: Fig. 4 left's x)
  bool weights_streamed = false;  // layer streaming under LoadOptions::max_memory_bytes
  bool gives_logits = true;    // forward() can write logits (sinklab's own checkpoints in the survey: no)
  Device device;               // where the weights and activations live (LoadOptions::device); the taps
                               // it reports are on it (a host observer of a GPU model: probe::HostTaps)
  ops::AttnKernel attention_kernel = ops::AttnKernel::reference;  // LoadOptions::attention_kernel
};

// What the sink is for (issue #19): attention that cannot reach the first tokens, StreamingLLM's cache of
// attention sinks + recent tokens, and the first token's massive activations taken away.
struct AttentionAblation {
  enum class Kind : uint8_t {
    none,
    window,        // every query sees its `window` most recent keys (itself included), nothing before
    window_sinks,  // the same plus the first `sink_tokens` keys (StreamingLLM's "attention sink + recent"
                   // cache of sink_tokens + window entries). Rotary models re-assign positions inside the
                   // cache as StreamingLLM does: once the cache is full (query i >= sink_tokens + window),
                   // the query sits at cache slot sink_tokens + window - 1 and sink t at slot t, so a sink's
                   // relative distance is sink_tokens + window - 1 - t instead of i - t (recent keys keep
                   // i - j). Learned absolute positions (GPT-2, OPT) and position-free attention (Jamba)
                   // have nothing to re-assign.
    mask_first,    // from layer from_layer on, no query but the first sees key 1 (its logits masked)
  };
  Kind kind = Kind::none;
  int64_t window = 0;
  int64_t sink_tokens = 0;
  int from_layer = 0;
};
// The top `top_dims` features of h_1 by magnitude (per sequence), at the output of block `layer`, set to
// zero or to their mean over the other tokens of the sequence (Sun et al., "Massive Activations in LLMs").
struct HiddenAblation {
  enum class Kind : uint8_t { none, zero, mean };
  Kind kind = Kind::none;
  int layer = 0;
  int top_dims = 0;
};

struct ForwardOptions {
  // Table 7 interventions on learned-position models (0-based positions; -1 = off):
  int64_t replace_first_position_with = -1;  // p_1 := p_t
  int64_t swap_first_position_with = -1;     // p_1 <-> p_t
  AttentionAblation attention_ablation;
  HiddenAblation hidden_ablation;
  bool want_logits = true;
};

struct LoadOptions {
  int64_t max_memory_bytes = 0;  // --max-memory: 0 = unbounded; otherwise layer streaming (only the
                                 // current layer's weights resident as f32, mapped pages released)
  bool resident_if_fits = false; // a bound that holds every f32 weight with a quarter to spare keeps
                                 // them resident (the survey's default, per-rank budget)
  int threads = 0;               // 0 = OpenMP default
  // Where the forward runs: the CPU, or a GPU (weights converted on the host and copied up, resident or
  // streamed layer by layer under max_memory_bytes, which then bounds the GPU's memory). Token ids and
  // logits stay host tensors either way.
  Device device = Device::cpu();
  // The attention kernel the forward asks for (backend/attention_dispatch.hpp). reference: f32 attention
  // on every device, so a GPU survey measures what the CPU survey measures to f32 rounding; auto lets a
  // GPU take cuDNN's fused SDPA (bf16 inside, faster at long T; docs/DESIGN.md "Probes on a GPU").
  ops::AttnKernel attention_kernel = ops::AttnKernel::reference;
};

class HfModel {
 public:
  virtual ~HfModel() = default;
  virtual const HfModelInfo& info() const = 0;
  // ids i32 [B,T] on the host. Calls observer->on_layer(taps) once per layer in order (sinklab::LayerTaps,
  // src/model/layer_taps.hpp; Mamba layers: q/k/v undefined, attention nullptr), and writes
  // logits f32 [B,T,V] when `logits` is defined. Throws sinklab::Error on bad input.
  virtual void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) = 0;
};

// Reads <dir>/config.json, dispatches on model_type to the family file (a registry: each family file
// registers its model_type(s)), opens the weights (hf::Checkpoint: safetensors or PyTorch, single or sharded).
// Any problem (missing dir/file, unknown model_type, unsupported config switch, missing tensor, wrong
// shape, truncated safetensors) throws sinklab::Error with ONE line naming the file and the problem.
std::unique_ptr<HfModel> load_model(const std::string& dir, const LoadOptions& options = {});

}  // namespace sinklab::hf
