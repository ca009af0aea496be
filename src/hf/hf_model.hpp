// Pretrained Hugging Face models (the survey's model side, paper Sec. 3-5): one family per file
// (gpt2.cpp, gpt_neox.cpp, opt.cpp, llama.cpp, jamba.cpp), each a tensor-name table plus a forward
// written over the op API, reporting every layer to a LayerObserver exactly as the trainable model does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/layer_taps.hpp"
#include "core/tensor.hpp"

namespace sinklab::hf {

struct HfModelInfo {
  std::string model_type;      // config.json "model_type": gpt2 | gpt_neox | opt | llama | mistral | jamba
  std::string dir;             // the model directory
  std::string weights;         // the file the weights were read from: model.safetensors,
                               // model.safetensors.index.json, pytorch_model.bin or pytorch_model.bin.index.json
  int n_layers = 0, n_heads = 0, n_kv_heads = 0, d_model = 0, vocab_size = 0;
  int64_t max_positions = 0;   // longest sequence the model accepts (learned positions) or 0 = unbounded
  bool learned_positions = false;  // GPT-2 / OPT: the position interventions of Table 7 apply
  std::vector<int> attention_layers;  // indices of layers that have attention (Jamba: a subset)
  int64_t weight_bytes = 0;    // all weights as f32
  bool weights_streamed = false;  // layer streaming under LoadOptions::max_memory_bytes
  bool gives_logits = true;    // forward() can write logits (sinklab's own checkpoints in the survey: no)
};

struct ForwardOptions {
  // Table 7 interventions on learned-position models (0-based positions; -1 = off):
  int64_t replace_first_position_with = -1;  // p_1 := p_t
  int64_t swap_first_position_with = -1;     // p_1 <-> p_t
  bool want_logits = true;
};

struct LoadOptions {
  int64_t max_memory_bytes = 0;  // --max-memory: 0 = unbounded; otherwise layer streaming (only the
                                 // current layer's weights resident as f32, mapped pages released)
  bool resident_if_fits = false; // a bound that holds every f32 weight with a quarter to spare keeps
                                 // them resident (the survey's default, per-rank budget)
  int threads = 0;               // 0 = OpenMP default
};

class HfModel {
 public:
  virtual ~HfModel() = default;
  virtual const HfModelInfo& info() const = 0;
  // ids i32 [B,T] on the host. Calls observer->on_layer(taps) once per layer in order (sinklab::LayerTaps,
  // src/backend/layer_taps.hpp; Mamba layers: q/k/v undefined, attention nullptr), and writes
  // logits f32 [B,T,V] when `logits` is defined. Throws sinklab::Error on bad input.
  virtual void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) = 0;
};

// Reads <dir>/config.json, dispatches on model_type to the family file (a registry: each family file
// registers its model_type(s)), opens the weights (hf::Checkpoint: safetensors or PyTorch, single or sharded).
// Any problem (missing dir/file, unknown model_type, unsupported config switch, missing tensor, wrong
// shape, truncated safetensors) throws sinklab::Error with ONE line naming the file and the problem.
std::unique_ptr<HfModel> load_model(const std::string& dir, const LoadOptions& options = {});

}  // namespace sinklab::hf
