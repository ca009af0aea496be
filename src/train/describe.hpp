// sinklab-pretrain --describe: what a job would build and hold, as one JSON object, without data, a
// model or training (analysis/plan.py sizes job files from it; analysis/pretrain_defaults.json is the
// default configuration's). Every figure comes from the code the trainer runs: param_layout and its counts,
// the activation plan of Transformer::ensure_activations.
#pragma once

#include <string>

#include "train/train_config.hpp"

namespace sinklab::train {

// The keys: "settings" (every option of the run with its value, as the results file's config attribute
// writes them), "axes" and "axis_defaults" (the model's variant axes, ModelConfig::axes() of the run and of
// ModelConfig{}), "params" (name, shape, numel in buffer order), "n_params", "n_params_non_embedding",
// "flops_per_token" (at the context), "activation_bytes" (per --recompute mode: per_layer, recomputed,
// rest, total of one micro-batch of micro-batch-rows rows, the trainer's activation_bytes_* attributes).
std::string describe_json(const TrainConfig& cfg);

}  // namespace sinklab::train
