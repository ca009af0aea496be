#include "train/describe.hpp"

#include <nlohmann/json.hpp>

#include "model/transformer.hpp"
#include "train/run_dir.hpp"

namespace sinklab::train {

namespace {

nlohmann::json pairs_object(const std::vector<std::pair<std::string, std::string>>& pairs) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : pairs) out[key] = value;
  return out;
}

}  // namespace

std::string describe_json(const TrainConfig& cfg) {
  const model::ModelConfig& m = cfg.model;
  const std::vector<model::ParamSpec> specs = model::param_layout(m, nullptr);
  nlohmann::json params = nlohmann::json::array();
  for (const model::ParamSpec& spec : specs)
    params.push_back({{"name", spec.name}, {"shape", spec.shape}, {"numel", spec.numel}});
  nlohmann::json activations = nlohmann::json::object();
  for (model::Recompute mode : {model::Recompute::none, model::Recompute::attention, model::Recompute::block}) {
    const model::ActivationBytes bytes =
        model::Transformer::activation_bytes(m, mode, model::parse_precision(cfg.precision), cfg.micro_batch_rows,
                                             m.context);
    activations[model::recompute_name(mode)] = {{"per_layer", bytes.kept_per_layer},
                                               {"recomputed", bytes.recomputed},
                                               {"rest", bytes.rest},
                                               {"total", bytes.total(m.n_layers)}};
  }
  const nlohmann::json out = {
      {"settings", fingerprint_of_text(cfg.config_text)},  // the same `name = value` lines
      {"axes", pairs_object(m.axes())},
      {"axis_defaults", pairs_object(model::ModelConfig{}.axes())},
      {"params", params},
      {"n_params", model::count_parameters(specs)},
      {"n_params_non_embedding", model::count_parameters_non_embedding(specs)},
      {"flops_per_token", model::flops_per_token(m, specs, m.context)},
      {"activation_bytes", activations},
  };
  return out.dump(1) + "\n";
}

}  // namespace sinklab::train
