#include "probe/vocabulary.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace sinklab::probe {
namespace {

using json = nlohmann::json;

json read_json(const std::string& path) {
  std::ifstream in(path);
  SL_CHECK(in.good(), "cannot read %s", path.c_str());
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    SL_FAIL("%s: not valid JSON (%s)", path.c_str(), e.what());
  }
}

// config.json token ids: a number, a list of numbers, or null.
void add_ids(const json& v, std::vector<int64_t>& out) {
  if (v.is_number_integer()) out.push_back(v.get<int64_t>());
  if (v.is_array())
    for (const json& x : v)
      if (x.is_number_integer()) out.push_back(x.get<int64_t>());
}

// A special token as tokenizer_config.json / special_tokens_map.json spell it: "<s>" or {"content": "<s>"}.
const json* token_content(const json& v) {
  if (v.is_string()) return &v;
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return &v["content"];
  return nullptr;
}

}  // namespace

SamplingVocabulary sampling_vocabulary(const std::string& model_dir, int64_t model_vocab_size) {
  SL_CHECK(model_vocab_size > 0, "%s: the model has no vocabulary", model_dir.c_str());
  namespace fs = std::filesystem;
  SamplingVocabulary v;
  std::vector<int64_t> special;
  int64_t size = model_vocab_size;
  const std::string tok_path = (fs::path(model_dir) / "tokenizer.json").string();
  if (fs::exists(tok_path)) {
    const json tok = read_json(tok_path);
    int64_t max_id = -1;
    try {
      const json& vocab = tok.at("model").at("vocab");
      if (vocab.is_object())  // BPE, WordLevel, WordPiece: token -> id
        for (const auto& [token, id] : vocab.items()) max_id = std::max(max_id, id.get<int64_t>());
      else if (vocab.is_array())  // Unigram: [piece, score] by id
        max_id = int64_t(vocab.size()) - 1;
      for (const json& t : tok.value("added_tokens", json::array())) {
        const int64_t id = t.at("id").get<int64_t>();
        max_id = std::max(max_id, id);
        if (t.value("special", false)) special.push_back(id);
      }
    } catch (const json::exception& e) {
      SL_FAIL("%s: unexpected tokenizer layout (%s)", tok_path.c_str(), e.what());
    }
    SL_CHECK(max_id >= 0, "%s: the tokenizer has no tokens", tok_path.c_str());
    size = std::min(size, max_id + 1);
    v.source = tok_path;
  } else if (fs::exists(fs::path(model_dir) / "vocab.json")) {
    // GPT-2/OPT as the hub serves them (vocab.json + merges.txt): the ids of vocab.json; special = the
    // tokens tokenizer_config.json and special_tokens_map.json name (bos/eos/unk/pad, added tokens).
    const std::string vocab_path = (fs::path(model_dir) / "vocab.json").string();
    const json vocab = read_json(vocab_path);
    SL_CHECK(vocab.is_object() && !vocab.empty(), "%s: not a {token: id} object", vocab_path.c_str());
    int64_t max_id = -1;
    for (const auto& [token, id] : vocab.items()) {
      SL_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0, "%s: token '%s' has no id >= 0", vocab_path.c_str(),
               token.c_str());
      max_id = std::max(max_id, id.get<int64_t>());
    }
    size = std::min(size, max_id + 1);
    auto add_token = [&](const json& t) {
      if (const json* content = token_content(t); content && vocab.contains(content->get<std::string>()))
        special.push_back(vocab[content->get<std::string>()].get<int64_t>());
    };
    for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
      const std::string path = (fs::path(model_dir) / name).string();
      if (!fs::exists(path)) continue;
      const json cfg = read_json(path);
      if (!cfg.is_object()) continue;
      for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"})
        if (cfg.contains(key)) add_token(cfg[key]);
      if (cfg.contains("added_tokens_decoder") && cfg["added_tokens_decoder"].is_object())
        for (const auto& [id, t] : cfg["added_tokens_decoder"].items())
          if (t.is_object() && t.value("special", false)) add_token(t);
    }
    v.source = vocab_path;
  } else {
    v.source = "config.json vocab_size (no tokenizer.json or vocab.json)";
  }
  const std::string cfg_path = (fs::path(model_dir) / "config.json").string();
  if (fs::exists(cfg_path)) {
    const json cfg = read_json(cfg_path);
    for (const char* key : {"bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id"})
      if (cfg.contains(key)) add_ids(cfg[key], special);
  }
  v.size = uint32_t(size);
  for (int64_t id : special)
    if (id >= 0 && id < size) v.special.push_back(uint32_t(id));
  std::sort(v.special.begin(), v.special.end());
  v.special.erase(std::unique(v.special.begin(), v.special.end()), v.special.end());
  SL_CHECK(v.special.size() < v.size, "%s: every token of the vocabulary is special", model_dir.c_str());
  return v;
}

}  // namespace sinklab::probe
