#include "probe/survey_plan.hpp"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/text.hpp"

namespace sinklab::probe {
namespace {

namespace fs = std::filesystem;

void check_name(const std::string& name, const std::string& where) {
  SL_CHECK(!name.empty() && name != "." && name != ".." &&
               name.find_first_of("/: \t") == std::string::npos,
           "%s: model name '%s' must be non-empty without '/', ':' or spaces", where.c_str(), name.c_str());
}

std::string resolve_dir(const std::string& dir, const std::string& model_root) {
  if (fs::path(dir).is_absolute() || model_root.empty()) return dir;
  return (fs::path(model_root) / dir).string();
}

}  // namespace

std::string Intervention::tag() const {
  return std::string(kind == Kind::replace ? "replace_" : "swap_") + std::to_string(t);
}

std::vector<Intervention> parse_interventions(const std::string& text, const std::string& where) {
  std::vector<Intervention> out;
  if (text == "none") return out;
  for (const std::string& item : split_commas(text)) {
    const size_t colon = item.find(':');
    Intervention iv;
    const std::string kind = item.substr(0, colon);
    bool ok = colon != std::string::npos && (kind == "replace" || kind == "swap");
    if (ok) {
      iv.kind = kind == "replace" ? Intervention::Kind::replace : Intervention::Kind::swap;
      const char* b = item.data() + colon + 1;
      const char* e = item.data() + item.size();
      auto [p, ec] = std::from_chars(b, e, iv.t);
      ok = ec == std::errc() && p == e && b != e && iv.t >= 2;
    }
    SL_CHECK(ok, "%s: '%s' is not replace:t or swap:t (t = the paper's position, >= 2)", where.c_str(), item.c_str());
    out.push_back(iv);
  }
  return out;
}

SurveyModel parse_model_line(const std::string& line, const std::string& model_root) {
  const std::string where = "model = " + line;
  std::istringstream in(line);
  std::string name, dir, word;
  in >> name >> dir;
  SL_CHECK(!dir.empty(), "%s: expected NAME DIR [inputs=FILE] [interventions=LIST] [qk-maps=L:H,...] "
           "[attention-maps=L:H,...]", where.c_str());
  check_name(name, where);
  SurveyModel m{name, resolve_dir(dir, model_root), "", std::nullopt, std::nullopt, std::nullopt};
  auto pairs = [&](const std::string& key, const std::string& value) {
    try {
      return parse_head_pairs(value, key.c_str());
    } catch (const Error& e) {
      SL_FAIL("%s: %s", where.c_str(), e.what());
    }
  };
  while (in >> word) {
    const size_t eq = word.find('=');
    const std::string key = word.substr(0, eq), value = eq == std::string::npos ? "" : word.substr(eq + 1);
    if (key == "inputs" && !value.empty()) m.inputs = value;
    else if (key == "interventions" && !value.empty()) m.interventions = parse_interventions(value, where);
    else if (key == "qk-maps" && eq != std::string::npos) m.qk_maps = pairs(key, value);
    else if (key == "attention-maps" && eq != std::string::npos) m.attention_maps = pairs(key, value);
    else SL_FAIL("%s: unknown setting '%s' (inputs=FILE, interventions=LIST|none, qk-maps=L:H,..., "
                 "attention-maps=L:H,...)", where.c_str(), word.c_str());
  }
  return m;
}

std::vector<SurveyModel> select_models(const std::vector<SurveyModel>& catalogue, const std::string& models,
                                       const std::string& model_root) {
  std::vector<SurveyModel> out;
  if (models == "all") {
    out = catalogue;
  } else {
    for (const std::string& want : split_commas(models)) {
      auto it = std::find_if(catalogue.begin(), catalogue.end(), [&](const SurveyModel& m) { return m.name == want; });
      if (it != catalogue.end()) {
        out.push_back(*it);
        continue;
      }
      // A directory: as given when it exists (or is absolute), else under --model-root. A name that is neither
      // (a typo) is refused here, before any item runs, not as failed items at the end of the survey.
      std::string dir = want;
      if (!fs::path(dir).is_absolute() && !fs::exists(dir)) dir = resolve_dir(dir, model_root);
      std::error_code ec;
      if (!fs::is_directory(dir, ec)) {
        std::string known;
        for (const SurveyModel& m : catalogue) known += (known.empty() ? "" : ", ") + m.name;
        SL_FAIL("--models: '%s' is neither a model of the catalogue (%s) nor a model directory (no directory %s)",
                want.c_str(), known.empty() ? "none: no model = lines" : known.c_str(), dir.c_str());
      }
      std::string name = fs::path(dir).lexically_normal().filename().string();
      if (name.empty()) name = fs::path(dir).lexically_normal().parent_path().filename().string();
      check_name(name, "--models " + want);
      out.push_back({name, dir, "", std::nullopt, std::nullopt, std::nullopt});
    }
  }
  SL_CHECK(!out.empty(), "--models selects no model (the config lists %zu)", catalogue.size());
  std::set<std::string> names;
  for (const SurveyModel& m : out) SL_CHECK(names.insert(m.name).second, "--models: model '%s' appears twice", m.name.c_str());
  return out;
}

namespace {

// <dir>/config.json as a JSON object, or nullopt when it is missing or malformed (the item reports that).
std::optional<nlohmann::json> read_config(const std::string& dir) {
  std::ifstream in(fs::path(dir) / "config.json");
  if (!in.good()) return std::nullopt;
  try {
    nlohmann::json j = nlohmann::json::parse(in);
    if (j.is_object()) return j;
  } catch (const nlohmann::json::exception&) {
  }
  return std::nullopt;
}

bool learned_position_type(const nlohmann::json& config) {
  const auto type = config.find("model_type");
  return type != config.end() && (*type == "gpt2" || *type == "opt");
}

}  // namespace

bool has_learned_positions(const std::string& dir) {
  const std::optional<nlohmann::json> config = read_config(dir);
  return config && learned_position_type(*config);
}

PositionLimit position_limit(const std::string& dir) {
  PositionLimit limit;
  const std::optional<nlohmann::json> config = read_config(dir);
  if (!config) return limit;
  // Gemma 3's hub config keeps the text model's settings under text_config.
  const nlohmann::json& text = config->contains("text_config") && (*config)["text_config"].is_object()
                                   ? (*config)["text_config"]
                                   : *config;
  for (const char* key : {"n_positions", "max_position_embeddings"}) {
    if (!text.contains(key) || !text[key].is_number_integer() || text[key].get<int64_t>() <= 0) continue;
    limit.positions = text[key].get<int64_t>();
    limit.key = key;
    break;
  }
  limit.hard = learned_position_type(*config) || config->contains("sinklab");  // sinklab's own: a fixed context
  return limit;
}

int64_t item_length(const SurveyItem& item, int64_t seq_len, int64_t long_len) {
  if (item.input == "hellaswag") return 0;
  if (item.input == "long") return long_len;
  return item.seq_len > 0 ? item.seq_len : seq_len;
}

std::vector<std::string> check_position_limits(const std::vector<SurveyModel>& models,
                                               const std::vector<SurveyItem>& items, int64_t seq_len,
                                               int64_t long_len) {
  std::vector<std::string> warnings;
  std::set<std::pair<int, int64_t>> seen;  // (model, T): one line each
  std::vector<std::optional<PositionLimit>> limits(models.size());
  for (const SurveyItem& item : items) {
    const int64_t T = item_length(item, seq_len, long_len);
    if (T == 0 || !seen.insert({item.model, T}).second) continue;
    const SurveyModel& model = models[size_t(item.model)];
    std::optional<PositionLimit>& limit = limits[size_t(item.model)];
    if (!limit) limit = position_limit(model.dir);
    if (limit->positions == 0 || T <= limit->positions) continue;
    const char* flag = item.input == "long" ? "--long-input-len" : item.seq_len > 0 ? "--seq-lens" : "--seq-len";
    SL_CHECK(!limit->hard, "%s: T = %lld exceeds the %lld positions of model %s (%s in %s/config.json), which has no "
             "position beyond them (learned position embeddings or a sinklab checkpoint's context): drop the length "
             "or the model", flag, (long long)T, (long long)limit->positions, model.name.c_str(), limit->key.c_str(),
             model.dir.c_str());
    warnings.push_back(strfmt("model %s: T = %lld (%s) exceeds its %s = %lld (%s/config.json): measured as asked, "
                              "with positions beyond the length it was trained for", model.name.c_str(), (long long)T,
                              flag, limit->key.c_str(), (long long)limit->positions, model.dir.c_str()));
  }
  return warnings;
}

std::string Ablation::tag() const {
  switch (kind) {
    case Kind::window: return "window_" + std::to_string(window);
    case Kind::window_sinks: return "window_" + std::to_string(window) + "_sinks_" + std::to_string(sink_tokens);
    case Kind::mask_first: return "mask_first_from_" + std::to_string(layer);
    case Kind::massive_zero: return "massive_zero_" + std::to_string(layer) + "_top" + std::to_string(top_dims);
    case Kind::massive_mean: return "massive_mean_" + std::to_string(layer) + "_top" + std::to_string(top_dims);
  }
  return "";
}

std::vector<Ablation> parse_ablations(const std::string& text, const std::string& where) {
  static const std::pair<const char*, Ablation::Kind> kKinds[] = {
      {"window", Ablation::Kind::window}, {"window_sinks", Ablation::Kind::window_sinks},
      {"mask_first", Ablation::Kind::mask_first}, {"massive_zero", Ablation::Kind::massive_zero},
      {"massive_mean", Ablation::Kind::massive_mean}};
  std::vector<Ablation> out;
  if (text == "none") return out;
  for (const std::string& item : split_commas(text)) {
    std::vector<std::string> parts;
    for (size_t b = 0, e; b <= item.size(); b = e + 1) {
      e = std::min(item.find(':', b), item.size());
      parts.push_back(item.substr(b, e - b));
    }
    Ablation a;
    bool known = false;
    for (const auto& [name, kind] : kKinds)
      if (parts[0] == name) known = true, a.kind = kind;
    std::vector<int64_t> n;
    for (size_t i = 1; i < parts.size(); ++i) {
      int64_t v = -1;
      auto [p, ec] = std::from_chars(parts[i].data(), parts[i].data() + parts[i].size(), v);
      n.push_back(ec == std::errc() && p == parts[i].data() + parts[i].size() && !parts[i].empty() ? v : -1);
    }
    const size_t want = !known ? 0 : a.kind == Ablation::Kind::window || a.kind == Ablation::Kind::mask_first ? 1 : 2;
    bool ok = known && n.size() == want && std::all_of(n.begin(), n.end(), [](int64_t v) { return v >= 0; });
    if (ok) {
      switch (a.kind) {
        case Ablation::Kind::window: a.window = n[0], ok = n[0] >= 1; break;
        case Ablation::Kind::window_sinks: a.window = n[0], a.sink_tokens = n[1], ok = n[0] >= 1 && n[1] >= 1; break;
        case Ablation::Kind::mask_first: a.layer = int(n[0]), ok = n[0] < (1 << 20); break;
        default: a.layer = int(n[0]), a.top_dims = int(n[1]), ok = n[0] < (1 << 20) && n[1] >= 1 && n[1] < (1 << 20);
      }
    }
    SL_CHECK(ok, "%s: '%s' is not window:W, window_sinks:W:s, mask_first:l, massive_zero:l:n or massive_mean:l:n "
             "(W, s, n >= 1; l a 0-based layer)", where.c_str(), item.c_str());
    out.push_back(a);
  }
  return out;
}

std::string SurveyItem::label() const {
  if (intervention) return input + "+" + intervention->tag();
  const std::string base = seq_len > 0 ? input + "@T" + std::to_string(seq_len) : input;
  return ablation ? base + "+" + ablation->tag() : base;
}

std::string SurveyItem::id(const std::vector<SurveyModel>& models) const {
  return models[size_t(model)].name + ":" + label() + ":" + domain;
}

std::string SurveyItem::group(const std::vector<SurveyModel>& models) const {
  return "/models/" + models[size_t(model)].name + "/" + label() + "/" + domain;
}

std::vector<SurveyItem> plan_items(const std::vector<SurveyModel>& models, const PlanOptions& o) {
  auto domains_of = [&](const std::string& input) -> std::vector<std::string> {
    if (input == "random" || input == "repeat" || input == "hellaswag") return {"-"};
    if (input == "natural") {
      SL_CHECK(!o.domains.empty(), "--domains names no domain (needed by the natural inputs)");
      return o.domains;
    }
    if (input == "long") {
      SL_CHECK(!o.long_domains.empty(), "--long-domains names no domain (needed by the long inputs)");
      return o.long_domains;
    }
    SL_FAIL("--inputs: '%s' is not natural, random, repeat, long or hellaswag", input.c_str());
  };
  for (const std::string& input : o.inputs) domains_of(input);  // checks the flags before anything else
  for (const std::string& d : o.domains) SL_CHECK(d != "-" && d.find('/') == std::string::npos, "--domains: bad domain '%s'", d.c_str());
  for (const std::string& d : o.long_domains)
    SL_CHECK(d != "-" && d.find('/') == std::string::npos, "--long-domains: bad domain '%s'", d.c_str());
  for (const std::string& d : o.seq_lens_domains)
    SL_CHECK(d != "-" && d.find('/') == std::string::npos, "--seq-lens-domains: bad domain '%s'", d.c_str());
  // The domains of an input at a --seq-lens length.
  auto length_domains_of = [&](const std::string& input) {
    return input == "natural" && !o.seq_lens_domains.empty() ? o.seq_lens_domains : domains_of(input);
  };

  if (!o.ablations.empty()) {
    SL_CHECK(!o.ablation_inputs.empty(), "--ablation-inputs names no input");
    for (const std::string& input : o.ablation_inputs)
      SL_CHECK(input == "natural" || input == "long", "--ablation-inputs: '%s' is not natural or long (ablations are "
               "measured by the next-token loss on text)", input.c_str());
  }
  std::vector<int64_t> lengths = {0};  // 0: --seq-len
  for (int64_t T : o.seq_lens)
    if (T != o.seq_len) lengths.push_back(T);

  std::vector<SurveyItem> items;
  for (int m = 0; m < int(models.size()); ++m) {
    for (const std::string& input : o.inputs)
      for (const std::string& domain : domains_of(input)) items.push_back({m, input, domain, std::nullopt});
    for (size_t i = 1; i < lengths.size(); ++i)
      for (const std::string& input : o.inputs)
        if (input == "natural" || input == "random" || input == "repeat")
          for (const std::string& domain : length_domains_of(input))
            items.push_back({m, input, domain, std::nullopt, lengths[i]});
    const SurveyModel& model = models[size_t(m)];
    const std::vector<Intervention> interventions =
        model.interventions ? *model.interventions
                            : (has_learned_positions(model.dir) ? o.interventions : std::vector<Intervention>{});
    if (!interventions.empty()) {
      SL_CHECK(!o.intervention_inputs.empty(), "--intervention-inputs names no input");
      for (const std::string& input : o.intervention_inputs)
        for (const std::string& domain : domains_of(input))
          for (const Intervention& iv : interventions) items.push_back({m, input, domain, iv, 0});
    }
    for (const Ablation& a : o.ablations)
      for (const std::string& input : o.ablation_inputs)
        for (int64_t T : input == "long" ? std::vector<int64_t>{0} : lengths)
          for (const std::string& domain : T == 0 ? domains_of(input) : length_domains_of(input))
            items.push_back({m, input, domain, std::nullopt, T, a});
  }
  std::set<std::string> ids;
  for (const SurveyItem& it : items)
    SL_CHECK(ids.insert(it.id(models)).second, "the survey lists item %s twice (repeated --inputs, domains or interventions?)",
             it.id(models).c_str());
  return items;
}

}  // namespace sinklab::probe
