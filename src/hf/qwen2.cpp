// Qwen2 / Qwen2.5 (HF model_type qwen2; transformers' modeling_qwen2.py, Qwen2ForCausalLM).
//
//   x = embed_tokens[ids]
//   per layer:  x = x + attn(rope(q), rope(k), v) Wo,   q|k|v = RMSNorm_1(x) Wq|Wk|Wv + bq|bk|bv
//               x = x + (silu(m Wg) * (m Wu)) Wd,       m = RMSNorm_2(x)
//   logits = RMSNorm_f(x) lm_head^T                     (tied to embed_tokens when tie_word_embeddings)
// A Llama with biases on the q, k and v projections and none on o (always: Qwen2 has no attention_bias
// switch; these are the biases the paper's Sec. 7 is about), grouped-query attention, rope_theta 1e6 in
// Qwen2.5, head_dim = hidden_size / heads. Qwen2's optional sliding window (use_sliding_window true, or
// layer_types with sliding_attention) is refused naming the key: no released Qwen2 checkpoint turns it on.
// The forward is llama.cpp's with this bias layout (load_llama_with_biases).

#include "core/error.hpp"
#include "hf/family.hpp"
#include "hf/registry.hpp"

namespace sinklab::hf {

std::unique_ptr<HfModel> load_qwen2(const ModelSource& source, const LoadOptions& options) {
  const HfConfig& cfg = source.config;
  if (cfg.get_bool("use_sliding_window", false))
    cfg.unsupported("use_sliding_window true (sinklab's qwen2 attends to every earlier key)");
  const nlohmann::json types = cfg.json().contains("layer_types") ? cfg.json()["layer_types"] : nlohmann::json();
  if (!types.is_null()) {
    SL_CHECK(types.is_array(), "%s: layer_types must be an array", cfg.path().c_str());
    for (size_t l = 0; l < types.size(); ++l) {
      const nlohmann::json& type = types[l];
      if (!type.is_string() || type.get_ref<const std::string&>() != "full_attention")
        cfg.unsupported(strfmt("layer_types[%zu] %s (sinklab's qwen2 has full_attention layers only)", l,
                               type.dump().c_str()));
    }
  }
  return load_llama_with_biases(source, options, LlamaBiases{/*qkv=*/true, /*o=*/false, /*mlp=*/false});
}

}  // namespace sinklab::hf
