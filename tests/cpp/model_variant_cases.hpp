// The trainable model's variant cases of tests/golden/model_variants.json (gen_model_variants.py): the
// case names, each case's ModelConfig, and the golden tensors' shape keys. Read by test_model_variants
// (against the float64 PyTorch reference) and gpu/test_cuda_model (the CUDA model against the CPU one).
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/config.hpp"
#include "test_util.hpp"

namespace sinklab::test {

inline const nlohmann::json& golden_index() {
  static const nlohmann::json index = [] {
    const std::string path = golden_path("model_variants.json");
    std::ifstream in(path);
    if (!in) throw Error("cannot open golden index " + path);
    return nlohmann::json::parse(in);
  }();
  return index;
}

inline std::vector<std::string> case_names() {
  std::vector<std::string> names;
  try {
    for (const auto& [name, c] : golden_index().at("cases").items()) names.push_back(name);
  } catch (const std::exception&) {
    names.push_back("golden_index_unreadable");  // the test body then fails on the same read
  }
  return names;
}

inline model::ModelConfig config_of(const nlohmann::json& c) {
  const nlohmann::json& d = c.at("dims");
  model::ModelConfig cfg;
  cfg.vocab_size = d.at("vocab").get<int>();
  cfg.d_model = d.at("d").get<int>();
  cfg.n_layers = d.at("layers").get<int>();
  cfg.n_heads = d.at("heads").get<int>();
  cfg.n_kv_heads = d.at("kv_heads").get<int>();
  cfg.ffn_hidden = d.at("ffn").get<int>();
  cfg.context = d.at("context").get<int>();
  cfg.norm_eps = d.at("norm_eps").get<double>();
  cfg.rope_theta = d.at("rope_theta").get<double>();
  for (const auto& [flag, value] : c.at("axes").items()) cfg.set_axis(flag, value.get<std::string>());
  return cfg;
}

// The case's --precision: "precision": "bf16" in its entry, else fp32.
inline model::Precision precision_of(const nlohmann::json& c) {
  return c.contains("precision") ? model::parse_precision(c.at("precision").get<std::string>())
                                 : model::Precision::fp32;
}

inline std::string shape_key(const std::vector<int64_t>& shape) {
  std::string s;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += 'x';
    s += std::to_string(shape[i]);
  }
  return s;
}

}  // namespace sinklab::test
