#include "hf/registry.hpp"

#include <omp.h>

#include <filesystem>

#include "core/error.hpp"

namespace sinklab::hf {

const std::vector<Family>& families() {
  static const std::vector<Family> kFamilies = {
      {"gpt2", load_gpt2},
      {"gpt_neox", load_gpt_neox},
      {"opt", load_opt},
      {"llama", load_llama},
      {"mistral", load_llama},
      {"jamba", load_jamba},
      {"qwen2", load_qwen2},
      {"gemma3_text", load_gemma3},
  };
  return kFamilies;
}

const Family* find_family(const std::string& model_type) {
  for (const Family& f : families())
    if (model_type == f.model_type) return &f;
  return nullptr;
}

std::unique_ptr<HfModel> load_model(const std::string& dir, const LoadOptions& options) {
  namespace fs = std::filesystem;
  std::error_code ec;
  SL_CHECK(fs::is_directory(dir, ec), "%s: not a model directory", dir.c_str());
  SL_CHECK(options.threads >= 0, "--threads must be >= 0 (0 = OpenMP default), got %d", options.threads);
  ModelSource source{dir, HfConfig::read((fs::path(dir) / "config.json").string()), nullptr};
  const std::string model_type = source.config.get_string("model_type");
  const Family* family = find_family(model_type);
  if (family == nullptr) {
    std::string known;
    for (const Family& f : families()) known += std::string(known.empty() ? "" : ", ") + f.model_type;
    SL_FAIL("%s: unknown model_type '%s' (sinklab reads %s)", source.config.path().c_str(), model_type.c_str(),
            known.c_str());
  }
  source.weights = std::make_shared<const Checkpoint>(dir);
  if (options.threads > 0) omp_set_num_threads(options.threads);
  return family->load(source, options);
}

}  // namespace sinklab::hf
