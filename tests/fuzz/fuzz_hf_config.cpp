// libFuzzer target: every HF family's reading of config.json (hf/<family>.cpp: model_type, the head
// geometry, rotary and activation settings, per-family switches). The input is the config.json text; the
// family its model_type names loads it against the weights of that family's first test fixture
// (tests/fixtures/hf), so the config is read in full before the weights' names and shapes refuse it (or,
// when it describes the fixture, the model loads). Seeds: the fixtures' own config.json files.
#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "fuzz_util.hpp"
#include "hf/registry.hpp"

namespace fs = std::filesystem;
using namespace sinklab;

namespace {
// model_type -> the model source (directory, weights) of its first fixture, sorted by directory name.
std::map<std::string, hf::ModelSource>& fixtures() {
  static std::map<std::string, hf::ModelSource> by_type;
  return by_type;
}
}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(fs::path(SINKLAB_FIXTURE_DIR) / "hf")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& dir : dirs) {
    const hf::HfConfig config = hf::HfConfig::read((dir / "config.json").string());
    const std::string type = config.get_string("model_type");
    if (!fixtures().count(type))
      fixtures().emplace(type, hf::ModelSource{dir.string(), config, std::make_shared<const hf::Checkpoint>(dir.string())});
  }
  for (const hf::Family& f : hf::families())
    if (!fixtures().count(f.model_type)) {
      std::fprintf(stderr, "fuzz_hf_config: no fixture of model_type %s in %s\n", f.model_type, SINKLAB_FIXTURE_DIR);
      std::abort();
    }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_file("config.json", data, size);
  fuzz::expect_clean([&] {
    const hf::HfConfig config = hf::HfConfig::read(path);
    const std::string type = config.get_string("model_type");
    const hf::Family* family = hf::find_family(type);
    if (family == nullptr) return;
    hf::ModelSource source = fixtures().at(type);
    source.config = config;
    hf::LoadOptions options;
    options.threads = 1;
    family->load(source, options);
  });
  return 0;
}
