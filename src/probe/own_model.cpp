#include "probe/own_model.hpp"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/transformer.hpp"

namespace sinklab::probe {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  SL_CHECK(in.good(), "%s: cannot open", path.c_str());
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class OwnModel : public hf::HfModel {
 public:
  OwnModel(const std::string& dir, const hf::LoadOptions& options)
      : model_(model::ModelConfig::from_hf_config_json(read_text(dir + "/config.json"), dir + "/config.json"),
               options.device) {
    model_.set_attention_kernel(options.attention_kernel);
    const std::string weights_path = dir + "/model.safetensors";
    io::SafetensorsFile file(weights_path);
    for (const auto& spec : model_.specs()) {
      SL_CHECK(file.contains(spec.name), "%s: missing tensor '%s'", weights_path.c_str(), spec.name.c_str());
      Tensor stored = file.view(spec.name);
      Tensor into = model_.param(spec.name);
      SL_CHECK(stored.ndim == into.ndim && std::equal(into.shape.begin(), into.shape.begin() + into.ndim,
                                                      stored.shape.begin()),
               "%s: tensor '%s' is %s, the config needs %s", weights_path.c_str(), spec.name.c_str(),
               stored.shape_str().c_str(), into.shape_str().c_str());
      ops::copy(into, stored);  // converts bf16/f16/f64 to f32
    }
    const model::ModelConfig& c = model_.config();
    info_.model_type = "sinklab";
    info_.dir = dir;
    info_.weights = "model.safetensors";
    info_.n_layers = c.n_layers;
    info_.n_heads = c.n_heads;
    info_.n_kv_heads = c.kv_heads();
    info_.d_model = c.d_model;
    info_.vocab_size = c.vocab_size;
    info_.max_positions = c.context;
    info_.learned_positions = false;  // the Table 7 interventions are for GPT-2/OPT
    for (int l = 0; l < c.n_layers; ++l) info_.attention_layers.push_back(l);
    info_.weight_bytes = model_.num_parameters() * int64_t(sizeof(float));
    info_.gives_logits = false;  // the trainable model reports its layers only; the survey measures no loss
    info_.device = options.device;
    info_.attention_kernel = options.attention_kernel;
  }

  const hf::HfModelInfo& info() const override { return info_; }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const hf::ForwardOptions& opt) override {
    SL_CHECK(!logits.defined(), "%s: sinklab checkpoints report their layers only (no logits in the survey)",
             info_.dir.c_str());
    SL_CHECK(opt.replace_first_position_with < 0 && opt.swap_first_position_with < 0,
             "%s: position interventions apply to learned-position HF models only", info_.dir.c_str());
    if (!observer) return;
    model_.forward_observe(staged_copy(ids_buffer_, ids, info_.device), *observer);
  }

 private:
  model::Transformer model_;
  hf::HfModelInfo info_;
  Buffer ids_buffer_;  // a GPU model's token ids
};

}  // namespace

bool is_own_checkpoint(const std::string& dir) {
  const std::string path = dir + "/config.json";
  if (!std::filesystem::exists(path)) return false;
  try {
    const nlohmann::json j = nlohmann::json::parse(read_text(path));
    return j.is_object() && j.contains("sinklab");
  } catch (const nlohmann::json::exception&) {
    return false;  // hf::load_model reports the malformed file
  }
}

std::unique_ptr<hf::HfModel> load_any_model(const std::string& dir, const hf::LoadOptions& options) {
  if (is_own_checkpoint(dir)) return std::make_unique<OwnModel>(dir, options);
  return hf::load_model(dir, options);
}

}  // namespace sinklab::probe
