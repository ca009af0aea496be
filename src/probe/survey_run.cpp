#include "probe/survey_run.hpp"

#include "probe/own_model.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "backend/memory.hpp"
#include "core/error.hpp"
#include "core/node_memory.hpp"
#include "io/h5.hpp"
#include "io/sha256.hpp"
#include "backend/device_probe.hpp"
#include "probe/host_taps.hpp"
#include "probe/inputs.hpp"
#include "probe/multiple_choice.hpp"
#include "probe/vocabulary.hpp"

namespace sinklab::probe {
namespace {

namespace fs = std::filesystem;


// The provenance notes a model directory may carry (data_prep gguf-import writes them): these members
// of <dir>/sinklab_source.json become attributes of every item of the model.
constexpr const char* kSourceNotes = "sinklab_source.json";
constexpr const char* kSourceNoteKeys[] = {"source", "source_sha256", "quantization", "file_type", "variant",
                                           "model_name"};

void add_source_notes(const std::string& dir, io::ResultSet& set) {
  const std::string path = (fs::path(dir) / kSourceNotes).string();
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  SL_CHECK(in.good(), "%s: cannot open", path.c_str());
  nlohmann::json notes;
  try {
    notes = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    SL_FAIL("%s: not valid JSON (%s)", path.c_str(), e.what());
  }
  SL_CHECK(notes.is_object(), "%s: not a JSON object", path.c_str());
  for (const char* key : kSourceNoteKeys) {
    if (!notes.contains(key)) continue;
    SL_CHECK(notes[key].is_string(), "%s: \"%s\" is not a string", path.c_str(), key);
    set.set_attr("", key, notes[key].get<std::string>());
  }
}

template <class T>
std::vector<T> row(const std::vector<T>& v, size_t r, size_t width) {
  return std::vector<T>(v.begin() + long(r * width), v.begin() + long((r + 1) * width));
}

std::vector<int32_t> flatten(const std::vector<HeadPair>& pairs) {
  std::vector<int32_t> out;
  for (const HeadPair& p : pairs) out.insert(out.end(), {p.layer, p.head});
  return out;
}

}  // namespace

InputTokens read_natural_tokens(const std::string& path, const std::string& domain, int64_t n_requested, int64_t T,
                                int64_t vocab_size) {
  io::ResultsFile f = io::ResultsFile::open_read(path);
  const std::string ds = "/" + domain + "/tokens";
  SL_CHECK(f.exists(ds), "%s: no domain '%s' (no %s)", path.c_str(), domain.c_str(), ds.c_str());
  const std::vector<int64_t> dims = f.dims(ds);
  SL_CHECK(dims.size() == 2, "%s: %s is not [n, T]", path.c_str(), ds.c_str());
  SL_CHECK(dims[1] >= T, "%s: %s has rows of %lld tokens, %lld needed", path.c_str(), ds.c_str(), (long long)dims[1],
           (long long)T);
  const int64_t n = std::min(dims[0], n_requested);
  SL_CHECK(n >= 1, "%s: domain '%s' has no sequences", path.c_str(), domain.c_str());
  const io::Array a = f.read_array(ds);
  InputTokens t;
  t.buffer = Buffer::for_tensor(DType::i32, {n, T});
  t.ids = t.buffer.view(DType::i32, {n, T});
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < T; ++j) {
      const double id = a.data[size_t(i * dims[1] + j)];
      SL_CHECK(id >= 0 && id < double(vocab_size), "%s: %s[%lld, %lld] = %.0f is outside the model's vocabulary (%lld)",
               path.c_str(), ds.c_str(), (long long)i, (long long)j, id, (long long)vocab_size);
      t.ids.ptr<int32_t>()[i * T + j] = int32_t(id);
    }
  t.bos = f.has_attr("/", "prefix_id") ? f.attr_int("/", "prefix_id") : -1;
  SL_CHECK(t.bos >= -1 && t.bos < vocab_size, "%s: prefix_id %lld is outside the model's vocabulary (%lld)",
           path.c_str(), (long long)t.bos, (long long)vocab_size);
  t.source = path;
  return t;
}

MemoryBudget MemoryBudget::resolve(int64_t max_memory_flag, int local_ranks, Device device) {
  MemoryBudget b;
  if (max_memory_flag >= 0) {
    b.bytes = max_memory_flag;
    return b;
  }
  if (device.is_cuda()) {
    const DeviceFacts gpu = cuda_device_facts(device.index);
    b.auto_ = true;
    b.bytes = std::max<int64_t>(1, gpu.memory_free / 10 * 9);
    b.origin = strfmt("auto: 9/10 of the %.1f GiB free on %s (%s)", double(gpu.memory_free) / double(1 << 30),
                      device.name().c_str(), gpu.name.c_str());
    return b;
  }
  const NodeMemory node = node_memory();
  b.auto_ = true;
  b.bytes = std::max<int64_t>(1, node.bytes / std::max(1, local_ranks));
  b.origin = strfmt("auto: %.1f GiB (%s) / %d rank%s on this node", double(node.bytes) / double(1 << 30),
                    node.source.c_str(), local_ranks, local_ranks == 1 ? "" : "s");
  return b;
}

hf::HfModel& ModelCache::get(const SurveyModel& model) {
  if (model.name != name_ || (!model_ && error_.empty())) {
    model_.reset();  // release the previous model before loading the next
    name_ = model.name;
    error_.clear();
    try {
      hf::LoadOptions options;
      options.max_memory_bytes = budget_.bytes;
      options.resident_if_fits = budget_.auto_;
      options.device = device_;
      options.attention_kernel = attention_kernel_;
      model_ = load_any_model(model.dir, options);
    } catch (const Error& e) {
      error_ = e.what();
      if (budget_.auto_ && error_.rfind("--max-memory", 0) == 0) error_ += " [--max-memory " + budget_.origin + "]";
    }
  }
  if (!error_.empty()) throw Error(error_);
  return *model_;
}

TokenizerFingerprint tokenizer_fingerprint(const std::string& model_dir) {
  static const std::vector<std::vector<std::string>> kForms = {
      {"tokenizer.json"}, {"tokenizer.model"}, {"vocab.json", "merges.txt"}};
  for (const auto& form : kForms) {
    bool present = true;
    for (const std::string& f : form) present = present && fs::is_regular_file(fs::path(model_dir) / f);
    if (!present) continue;
    if (form.size() == 1) return {form[0], io::sha256_file((fs::path(model_dir) / form[0]).string())};
    std::string lines, names;
    for (const std::string& f : form) {
      lines += io::sha256_file((fs::path(model_dir) / f).string()) + "  " + f + "\n";
      names += (names.empty() ? "" : " + ") + f;
    }
    return {names, io::sha256_hex(lines)};
  }
  SL_FAIL("%s: no tokenizer.json, tokenizer.model or vocab.json + merges.txt to match survey inputs by (name the "
          "inputs file with inputs= in the config)", model_dir.c_str());
}

std::string InputsFinder::find(const SurveyModel& model, int64_t T) {
  const bool hellaswag = kind_ == "hellaswag";
  if (hellaswag && fs::is_regular_file(dir_)) return dir_;
  if (!model.inputs.empty() && !hellaswag) {
    const std::string path = fs::path(model.inputs).is_absolute() || dir_.empty() ? model.inputs
                                                                                  : (fs::path(dir_) / model.inputs).string();
    SL_CHECK(fs::is_regular_file(path), "%s: no such survey inputs file (inputs= of model %s)", path.c_str(),
             model.name.c_str());
    return path;
  }
  SL_CHECK(!dir_.empty(), "model %s: no --%s-dir to find its %s inputs in", model.name.c_str(), kind_.c_str(),
           hellaswag ? "hellaswag" : "natural");
  TokenizerFingerprint tokenizer;
  try {
    tokenizer = tokenizer_fingerprint(model.dir);
  } catch (const Error&) {
    if (!hellaswag) throw;
    SL_FAIL("%s: no tokenizer.json, tokenizer.model or vocab.json + merges.txt to match hellaswag files by (name one "
            "file with --hellaswag-dir)", model.dir.c_str());
  }
  if (!indexed_) {
    SL_CHECK(fs::is_directory(dir_), "--%s-dir %s is not a %sdirectory", kind_.c_str(), dir_.c_str(),
             hellaswag ? "file or " : "");
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.is_regular_file() && e.path().extension() == ".h5") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const std::string& path : files) {
      try {
        io::ResultsFile f = io::ResultsFile::open_read(path);
        const bool is_hellaswag = f.has_attr("/", "kind") && f.attr_string("/", "kind") == "hellaswag";
        if (is_hellaswag != hellaswag) continue;
        entries_.push_back({path, f.attr_string("/", "tokenizer_sha256"), hellaswag ? 0 : f.attr_int("/", "T")});
      } catch (const Error&) {
        // not a survey inputs / hellaswag file: ignored
      }
    }
    indexed_ = true;
  }
  const std::string& sha = tokenizer.sha256;
  const Entry* best = nullptr;
  int64_t longest = 0;
  for (const Entry& e : entries_) {
    if (e.sha != sha) continue;
    longest = std::max(longest, e.T);
    if (e.T >= T && (!best || e.T < best->T)) best = &e;
  }
  SL_CHECK(longest > 0 || (hellaswag && best), "no %s files in %s were made with the tokenizer of %s (%s, fingerprint %s)",
           hellaswag ? "hellaswag" : "survey inputs", dir_.c_str(), model.dir.c_str(), tokenizer.files.c_str(),
           sha.substr(0, 12).c_str());
  SL_CHECK(best, "the survey inputs in %s for the tokenizer of %s have T <= %lld, %lld needed", dir_.c_str(),
           model.dir.c_str(), (long long)longest, (long long)T);
  return best->path;
}

namespace {

// The attributes every item of a model carries.
void add_model_attrs(const SurveyItem& item, const SurveyModel& model, const hf::HfModelInfo& info, io::ResultSet& set) {
  add_source_notes(model.dir, set);
  set.set_attr("", "input", item.input);
  set.set_attr("", "domain", item.domain);
  set.set_attr("", "model_type", info.model_type);
  set.set_attr("", "model_dir", model.dir);
  set.set_attr("", "weights", info.weights);
  set.set_attr("", "weights_streamed", int64_t(info.weights_streamed));
  if (info.n_params > 0) {  // sinklab's own checkpoints through own_model: no weight store to count
    set.set_attr("", "n_params", info.n_params);
    set.set_attr("", "n_params_non_embedding", info.n_params_non_embedding);
  }
}

// The forward options of an ablation item; one line naming the model when it cannot take it.
void set_ablation(const Ablation& a, const SurveyModel& model, const hf::HfModelInfo& info, hf::ForwardOptions& forward) {
  SL_CHECK(info.gives_logits, "%s: the %s ablation is measured by the next-token loss, which sinklab's own checkpoints "
           "in the survey do not give", model.dir.c_str(), a.tag().c_str());
  using AK = hf::AttentionAblation::Kind;
  using HK = hf::HiddenAblation::Kind;
  switch (a.kind) {
    case Ablation::Kind::window: forward.attention_ablation = {AK::window, a.window, 0, 0}; break;
    case Ablation::Kind::window_sinks: forward.attention_ablation = {AK::window_sinks, a.window, a.sink_tokens, 0}; break;
    case Ablation::Kind::mask_first: forward.attention_ablation = {AK::mask_first, 0, 0, a.layer}; break;
    case Ablation::Kind::massive_zero: forward.hidden_ablation = {HK::zero, a.layer, a.top_dims}; break;
    case Ablation::Kind::massive_mean: forward.hidden_ablation = {HK::mean, a.layer, a.top_dims}; break;
  }
}

void add_ablation_attrs(const Ablation& a, io::ResultSet& set) {
  static const char* const kKinds[] = {"window", "window_sinks", "mask_first", "massive_zero", "massive_mean"};
  set.set_attr("", "ablation", a.tag());
  set.set_attr("", "ablation_kind", std::string(kKinds[int(a.kind)]));
  if (a.kind == Ablation::Kind::window || a.kind == Ablation::Kind::window_sinks) {
    set.set_attr("", "window", a.window);
    set.set_attr("", "sink_tokens", a.sink_tokens);
  } else {
    set.set_attr("", "layer", int64_t(a.layer));
    if (!a.attention()) set.set_attr("", "top_dims", int64_t(a.top_dims));
  }
}

// A hellaswag item: the multiple-choice scores of the model's file (multiple_choice.hpp).
io::ResultSet measure_hellaswag(const SurveyItem& item, const SurveyModel& model, const SurveyParams& params,
                                hf::HfModel& hf_model, InputsFinder& hellaswag, const std::function<void()>& progress) {
  const hf::HfModelInfo& info = hf_model.info();
  SL_CHECK(info.gives_logits, "%s: the hellaswag input needs a model that gives logits (sinklab's own checkpoints "
           "in the survey give none)", model.dir.c_str());
  const MultipleChoiceSet mc = read_multiple_choice(hellaswag.find(model, 0), params.hellaswag_n, info.vocab_size);
  const MultipleChoiceScores scores = score_multiple_choice(hf_model, mc, progress);
  const int64_t N = mc.n_examples(), C = int64_t(mc.cont_start.size());
  io::ResultSet set;
  set.add_array("loglik", {C}, scores.loglik);
  set.add_array("n_cont_tokens", {C}, scores.n_cont_tokens);
  set.add_array("choice_chars", {C}, mc.choice_chars);
  std::vector<int32_t> example_offsets(mc.example_offsets.begin(), mc.example_offsets.end());
  set.add_array("example_offsets", {N + 1}, example_offsets);
  set.add_array("label", {N}, mc.label);
  set.add_array("pred", {N}, scores.pred);
  set.add_array("pred_norm", {N}, scores.pred_norm);
  set.set_attr("", "acc", scores.acc);
  set.set_attr("", "acc_norm", scores.acc_norm);
  set.set_attr("", "n_examples", N);
  set.set_attr("", "inputs_file", mc.path);
  add_model_attrs(item, model, info, set);
  return set;
}

}  // namespace

namespace {

// The sequence length, probe positions and forward options of an item.
struct ItemSetup {
  bool is_long = false, other_length = false;
  int64_t T = 0, n_requested = 0;
  int K = 0;  // alpha_k and Sink_k for k = 1..K
  hf::ForwardOptions forward;
};

ItemSetup item_setup(const SurveyItem& item, const SurveyModel& model, const SurveyParams& params,
                     const hf::HfModelInfo& info) {
  ItemSetup s;
  s.is_long = item.input == "long";
  s.other_length = item.seq_len > 0;  // a --seq-lens item (Fig. 3)
  s.T = item_length(item, params.seq_len, params.long_len);
  s.n_requested = s.is_long ? params.long_n_seq : params.n_seq;
  const int64_t T = s.T;
  SL_CHECK(info.max_positions == 0 || T <= info.max_positions, "%s: the model takes at most %lld positions, T = %lld asked",
           model.dir.c_str(), (long long)info.max_positions, (long long)T);
  s.K = params.max_k;
  if (item.intervention) {
    const Intervention& iv = *item.intervention;
    SL_CHECK(info.learned_positions, "%s: the %s intervention needs learned position embeddings, which %s models lack",
             model.dir.c_str(), iv.tag().c_str(), info.model_type.c_str());
    SL_CHECK(iv.t <= T, "the %s intervention needs T >= %lld (T = %lld)", iv.tag().c_str(), (long long)iv.t, (long long)T);
    (iv.kind == Intervention::Kind::replace ? s.forward.replace_first_position_with : s.forward.swap_first_position_with) =
        iv.t - 1;
    s.K = std::max<int>(s.K, int(iv.t));
  }
  if (s.other_length) s.K = int(std::min<int64_t>(s.K, T));  // alpha_k of a short --seq-lens item stops at k = T
  SL_CHECK(s.K <= T, "--max-k %d exceeds T = %lld", s.K, (long long)T);
  return s;
}

// The item's token ids [n, T]: natural rows from the survey inputs file, or random / repeated tokens
// drawn from the model's vocabulary without its special tokens.
InputTokens item_tokens(const SurveyItem& item, const SurveyModel& model, const SurveyParams& params,
                        const hf::HfModelInfo& info, const ItemSetup& s, InputsFinder& inputs) {
  if (item.input == "natural" || s.is_long)
    return read_natural_tokens(inputs.find(model, s.T), item.domain, s.n_requested, s.T, info.vocab_size);
  InputTokens tokens;
  const SamplingVocabulary vocab = sampling_vocabulary(model.dir, info.vocab_size);
  tokens.buffer = Buffer::for_tensor(DType::i32, {s.n_requested, s.T});
  tokens.ids = tokens.buffer.view(DType::i32, {s.n_requested, s.T});
  if (item.input == "random") random_inputs(tokens.ids, vocab.size, vocab.special, params.seed);
  else repeat_inputs(tokens.ids, vocab.size, vocab.special, params.seed);
  tokens.source = vocab.source + strfmt(" (%u ids, %zu special excluded)", vocab.size, vocab.special.size());
  return tokens;
}

SurveyShape survey_shape(const hf::HfModelInfo& info, const ItemSetup& s, const SurveyParams& params) {
  SurveyShape shape;
  shape.n_layers = info.n_layers;
  shape.attention_layers = info.attention_layers;
  if (shape.attention_layers.empty())
    for (int l = 0; l < info.n_layers; ++l) shape.attention_layers.push_back(l);
  shape.n_heads = info.n_heads;
  shape.n_kv_heads = info.n_kv_heads > 0 ? info.n_kv_heads : info.n_heads;
  shape.seq_len = s.T;
  shape.max_k = s.K;
  shape.eps = params.eps;
  return shape;
}

// The forward passes over the item's sequences, `batch` at a time; returns the summed next-token loss
// when want_loss (else 0). Whatever stops a pass (an error, a stop request) drops the model, which
// may have been left mid-layer.
double run_passes(hf::HfModel& hf_model, const Tensor& ids_all, int64_t batch, bool want_loss,
                  const hf::ForwardOptions& forward, LayerObserver& observer, ModelCache& models) {
  const int64_t n = ids_all.shape[0], T = ids_all.shape[1], V = int64_t(hf_model.info().vocab_size);
  Buffer logits_buffer;
  if (want_loss) logits_buffer = Buffer::for_tensor(DType::f32, {std::min(batch, n), T, V});
  double loss_sum = 0.0;
  try {
    for (int64_t first = 0; first < n; first += batch) {
      const int64_t b = std::min(batch, n - first);
      const Tensor ids = ids_all.slice(0, first, b);
      if (!want_loss) {
        hf_model.forward(ids, &observer, Tensor{}, forward);
        continue;
      }
      Tensor logits = logits_buffer.view(DType::f32, {b, T, V});
      hf_model.forward(ids, &observer, logits, forward);
      loss_sum += next_token_loss_sum(logits, ids);
    }
  } catch (...) {
    models.drop();
    throw;
  }
  return loss_sum;
}

// The probe's arrays (names and shapes: survey_run.hpp).
void add_probe_arrays(io::ResultSet& set, const SurveyResult& r, const SurveyShape& shape, const SurveyItem& item,
                      const std::vector<HeadPair>& qk, const std::vector<HeadPair>& attn) {
  const int64_t L = shape.n_layers, La = int64_t(shape.attention_layers.size()), H = shape.n_heads;
  const int64_t K = shape.max_k, T = shape.seq_len, E = int64_t(shape.eps.size());
  set.add_array("alpha", {La, H, K}, r.alpha);
  set.add_array("sink", {E}, row(r.sink_k, 0, size_t(E)));
  set.add_array("sink_eps", {E}, shape.eps);
  set.add_array("sink_k", {K, E}, r.sink_k);
  set.add_array("hnorm_first", {L}, r.hnorm_first);
  set.add_array("hnorm_rest", {L}, r.hnorm_rest);
  set.add_array("massive_ratio", {L}, r.massive_ratio);
  if (!r.massive_ratio_pre_norm.empty()) {
    set.add_array("hnorm_first_pre_norm", {L}, r.hnorm_first_pre_norm);
    set.add_array("hnorm_rest_pre_norm", {L}, r.hnorm_rest_pre_norm);
    set.add_array("massive_ratio_pre_norm", {L}, r.massive_ratio_pre_norm);
  }
  set.add_array("knorm_first", {La}, r.knorm_first);
  set.add_array("knorm_rest", {La}, r.knorm_rest);
  set.add_array("vnorm_first", {La}, r.vnorm_first);
  set.add_array("vnorm_rest", {La}, r.vnorm_rest);
  set.add_array("last_to_first", {La, H}, r.last_to_first);
  set.add_array("attention_layers", {La}, std::vector<int32_t>(shape.attention_layers.begin(), shape.attention_layers.end()));
  if (!qk.empty()) {
    const int64_t P = int64_t(qk.size());
    set.add_array("qk_pairs", {P, 2}, flatten(qk));
    set.add_array("qk_cos", {P, T, T}, r.qk_cos);
    set.add_array("qk_normprod", {P, T, T}, r.qk_normprod);
  }
  if (!attn.empty()) {
    const int64_t P = int64_t(attn.size());
    set.add_array("attention_pairs", {P, 2}, flatten(attn));
    set.add_array("attention_maps", {P, T, T}, r.attention_maps);
  }
  if (item.intervention) {
    set.add_array("sink_t", {E}, row(r.sink_k, size_t(item.intervention->t - 1), size_t(E)));
    set.set_attr("", "intervention", std::string(item.intervention->kind == Intervention::Kind::replace ? "replace" : "swap"));
    set.set_attr("", "t", item.intervention->t);
  }
}

}  // namespace

io::ResultSet measure_item(const SurveyItem& item, const SurveyModel& model, const SurveyParams& params,
                           ModelCache& models, InputsFinder& inputs, InputsFinder& hellaswag,
                           const std::function<void()>& progress) {
  hf::HfModel& hf_model = models.get(model);
  const hf::HfModelInfo& info = hf_model.info();
  if (item.input == "hellaswag") {
    try {
      return measure_hellaswag(item, model, params, hf_model, hellaswag, progress);
    } catch (...) {
      models.drop();  // as in run_passes: a pass that did not finish may have left the model mid-layer
      throw;
    }
  }
  ItemSetup s = item_setup(item, model, params, info);
  const int64_t T = s.T;
  const InputTokens tokens = item_tokens(item, model, params, info, s, inputs);
  const int64_t n = tokens.ids.shape[0];

  const SurveyShape shape = survey_shape(info, s, params);
  std::vector<std::string> skipped;
  std::vector<HeadPair> qk, attn;
  if (!s.is_long && !s.other_length) {  // [T,T] maps at T = 4096 would be 64 MiB each
    // The model line's own pairs where it names them (qk-maps= / attention-maps=), else the flags'.
    qk = resolve_head_pairs(model.qk_maps.value_or(params.qk_maps), info.n_layers, shape.attention_layers,
                            info.n_heads, &skipped);
    attn = resolve_head_pairs(model.attention_maps.value_or(params.attention_maps), info.n_layers,
                              shape.attention_layers, info.n_heads, &skipped);
  }
  // An attention ablation is measured by its loss alone (the probe's matrices would not be the model's).
  const bool probed = !(item.ablation && item.ablation->attention());
  if (item.ablation) set_ablation(*item.ablation, model, info, s.forward);
  SurveyProbe probe(shape, qk, attn);
  // A model on a GPU reports device taps: HostTaps copies them to the host the probe reads.
  HostTaps host_taps(probe);
  LayerObserver& probe_here = info.device.is_cpu() ? static_cast<LayerObserver&>(probe) : host_taps;
  ProgressObserver observer(probed ? &probe_here : nullptr, progress);
  // The same number of tokens per forward pass for every T (long inputs: one sequence at a time).
  int64_t batch = std::max<int64_t>(1, params.batch * params.seq_len / T);
  // The next-token loss needs the logits [batch,T,V] of a pass: fewer sequences per pass when they would
  // exceed --max-logits-memory; no loss when one sequence's would (the long inputs: 0.8-2 GiB at T = 4096),
  // except for an ablation, which is nothing without it.
  const int64_t logits_per_seq = T * int64_t(info.vocab_size) * int64_t(sizeof(float));
  const bool want_loss = info.gives_logits && logits_per_seq <= params.max_logits_bytes;
  SL_CHECK(want_loss || !item.ablation, "%s: the %s ablation is measured by the next-token loss: one sequence's logits "
           "(%.0f MiB at T = %lld) exceed --max-logits-memory", model.dir.c_str(), item.ablation->tag().c_str(),
           double(logits_per_seq) / double(1 << 20), (long long)T);
  s.forward.want_logits = want_loss;
  if (want_loss) batch = std::min(batch, params.max_logits_bytes / logits_per_seq);
  const double loss_sum = run_passes(hf_model, tokens.ids, batch, want_loss, s.forward, observer, models);

  io::ResultSet set;
  set.add_array("tokens", {n, T}, std::vector<int32_t>(tokens.ids.ptr<int32_t>(), tokens.ids.ptr<int32_t>() + n * T));
  // The probe's arrays; an attention ablation holds only its tokens, its loss and the attributes below.
  if (probed) add_probe_arrays(set, probe.result(), shape, item, qk, attn);
  if (want_loss) set.set_attr("", "loss", loss_sum / double(n * (T - 1)));
  if (item.ablation) add_ablation_attrs(*item.ablation, set);
  add_model_attrs(item, model, info, set);
  set.set_attr("", "n_seq", n);
  set.set_attr("", "n_seq_requested", s.n_requested);
  set.set_attr("", "T", T);
  set.set_attr("", "bos", tokens.bos);
  set.set_attr("", "seed", int64_t(params.seed));
  set.set_attr("", item.input == "natural" || s.is_long ? "inputs_file" : "vocabulary", tokens.source);
  if (probed && !skipped.empty()) {
    std::string text;
    for (const std::string& x : skipped) text += (text.empty() ? "" : ", ") + x;
    set.set_attr("", "skipped_pairs", text);
  }
  return set;
}

}  // namespace sinklab::probe
