// sinklab's own checkpoints as survey models: a directory with config.json (a Llama config with a
// "sinklab" section naming its variant axes) and model.safetensors runs through the trainable model
// (model/), so every attention variant is surveyed exactly as it was trained. Every other directory
// goes to the Hugging Face families (hf/).
#pragma once

#include <memory>
#include <string>

#include "hf/hf_model.hpp"

namespace sinklab::probe {

// Whether <dir>/config.json is one of sinklab's own checkpoints (has a "sinklab" section).
bool is_own_checkpoint(const std::string& dir);

// An own checkpoint (is_own_checkpoint) as an hf::HfModel, or hf::load_model for any other directory.
// Errors name the file, as hf::load_model's do.
std::unique_ptr<hf::HfModel> load_any_model(const std::string& dir, const hf::LoadOptions& options = {});

}  // namespace sinklab::probe
