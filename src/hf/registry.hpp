// model_type -> family loader. load_model (hf_model.hpp) reads config.json, looks its model_type up
// here, opens the weights and hands both to the family's loader.
//
// Adding a family: define its loader in the family file (signature FamilyLoader), declare it below and
// add a row to kFamilies in registry.cpp. The table is explicit on purpose: sinklab is a static
// library, and the linker drops object files nothing references, so a family file that registered
// itself through a static object would silently vanish from every binary.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "hf/checkpoint.hpp"
#include "hf/hf_model.hpp"

namespace sinklab::hf {

// What a family loader receives: the directory, its parsed config.json and its mapped weights.
struct ModelSource {
  std::string dir;
  HfConfig config;
  std::shared_ptr<const Checkpoint> weights;
};

using FamilyLoader = std::unique_ptr<HfModel> (*)(const ModelSource& source, const LoadOptions& options);

struct Family {
  const char* model_type;
  FamilyLoader load;
};

// Every registered family, in table order; nullptr when model_type is unknown.
const std::vector<Family>& families();
const Family* find_family(const std::string& model_type);

// The loaders (one per family file).
std::unique_ptr<HfModel> load_gpt2(const ModelSource& source, const LoadOptions& options);      // gpt2.cpp
std::unique_ptr<HfModel> load_gpt_neox(const ModelSource& source, const LoadOptions& options);  // gpt_neox.cpp
std::unique_ptr<HfModel> load_opt(const ModelSource& source, const LoadOptions& options);       // opt.cpp
// llama.cpp: model_type llama (LLaMA-2/3/3.1 and sinklab's own checkpoints) and mistral.
std::unique_ptr<HfModel> load_llama(const ModelSource& source, const LoadOptions& options);
// The Llama forward with another family's bias layout (Qwen2: q/k/v biases, none on o or the MLP).
struct LlamaBiases {
  bool qkv = false, o = false, mlp = false;
};
std::unique_ptr<HfModel> load_llama_with_biases(const ModelSource& source, const LoadOptions& options,
                                                const LlamaBiases& biases);
std::unique_ptr<HfModel> load_jamba(const ModelSource& source, const LoadOptions& options);      // jamba.cpp
std::unique_ptr<HfModel> load_qwen2(const ModelSource& source, const LoadOptions& options);      // qwen2.cpp
// gemma3.cpp: model_type gemma3_text (Gemma 3's text model, Gemma3ForCausalLM).
std::unique_ptr<HfModel> load_gemma3(const ModelSource& source, const LoadOptions& options);

}  // namespace sinklab::hf
