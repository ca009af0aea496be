#include "train/evaluation.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "backend/memory.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "probe/host_taps.hpp"

namespace sinklab::train {

bool BbmTask::is_trigger(int32_t token) const {
  return std::find(trigger_ids.begin(), trigger_ids.end(), token) != trigger_ids.end();
}

BbmTask read_bbm_meta(const std::string& path, const ChunkSampler& valid_data) {
  std::ifstream in(path);
  SL_CHECK(in.good(), "--bbm-meta: cannot read %s", path.c_str());
  nlohmann::json meta;
  try {
    meta = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    SL_FAIL("--bbm-meta %s: not JSON (%s)", path.c_str(), e.what());
  }
  SL_CHECK(meta.value("format", "") == "sinklab-bbm", "--bbm-meta %s: not data_prep bbm's bbm.json (format '%s')",
           path.c_str(), meta.value("format", "").c_str());
  BbmTask task;
  try {
    task.trigger_ids = meta.at("triggers").at("ids").get<std::vector<int32_t>>();
    task.bos_id = meta.at("vocab").at("bos_id").get<int32_t>();
    task.delimiter_id = meta.at("vocab").at("delimiter_id").get<int32_t>();
    // The file must describe the validation shards this run reads (by name and CRC-32).
    for (const auto& shard : valid_data.shards()) {
      const std::string name = std::filesystem::path(shard->path()).filename().string();
      SL_CHECK(meta.at("shards").contains(name), "--bbm-meta %s does not describe --valid-data %s", path.c_str(),
               shard->path().c_str());
      const std::string crc = meta.at("shards").at(name).at("crc32").get<std::string>();
      SL_CHECK(crc == strfmt("%08x", shard->header().crc32), "--bbm-meta %s describes another %s (crc32 %s, the file's "
               "is %08x): regenerate one or the other", path.c_str(), shard->path().c_str(), crc.c_str(),
               shard->header().crc32);
    }
  } catch (const nlohmann::json::exception& e) {
    SL_FAIL("--bbm-meta %s: %s", path.c_str(), e.what());
  }
  SL_CHECK(!task.trigger_ids.empty() && task.bos_id >= 0, "--bbm-meta %s: no trigger tokens or BOS", path.c_str());
  SL_CHECK(valid_data.bos_id() == uint32_t(task.bos_id), "--bbm-meta %s: BOS %d, but --valid-data's is %u", path.c_str(),
           task.bos_id, valid_data.bos_id());
  return task;
}

Evaluator::Evaluator(const TrainConfig& cfg, const parallel::World& world)
    : cfg_(cfg),
      world_(world),
      train_data_config_(data_config(cfg, /*validation=*/false)),
      valid_data_(data_config(cfg, /*validation=*/true)) {
  if (!cfg.bbm_meta.empty()) bbm_ = read_bbm_meta(cfg.bbm_meta, valid_data_);
  const int64_t rows = cfg.micro_batch_rows, C = cfg.model.context;
  inputs_buf_ = Buffer::for_tensor(DType::i32, {rows, C});
  targets_buf_ = Buffer::for_tensor(DType::i32, {rows, C});
  losses_buf_ = Buffer::for_tensor(DType::f32, {rows, C});
  probe_buf_ = Buffer::for_tensor(DType::i32, {rows, cfg.probe_length});
}

// The probe's query groups of a batch of probe inputs [n, T]: every query in group 0, or for BBM runs
// 0 = non-trigger (BOS included), 1 = trigger.
std::vector<int8_t> Evaluator::query_groups(const Tensor& probe_inputs) const {
  if (!bbm_) return {};
  std::vector<int8_t> groups(size_t(probe_inputs.numel()));
  for (size_t i = 0; i < groups.size(); ++i) groups[i] = bbm_->is_trigger(probe_inputs.ptr<int32_t>()[i]) ? 1 : 0;
  return groups;
}

// Without document rows: BOS and <d> at text positions >= 1 (with them, position 0 is the only BOS).
std::vector<uint8_t> Evaluator::marked_keys(const Tensor& probe_inputs) const {
  if (!bbm_ || cfg_.document_rows) return {};
  const int64_t T = probe_inputs.shape[1];
  std::vector<uint8_t> marked(size_t(probe_inputs.numel()));
  for (size_t i = 0; i < marked.size(); ++i)
    marked[i] = int64_t(i) % T != 0 && bbm_->is_boundary(probe_inputs.ptr<int32_t>()[i]);
  return marked;
}

namespace {

// Evaluation's sink_logit, k_bias_norm and v_bias_norm: each layer's S_h, ||k*_h||, ||v*_h|| from the model's
// parameters (copied to the host from a device).
void read_sink_parameters(const model::Transformer& model, int64_t n_layers, int64_t n_heads, Evaluation& e) {
  for (const model::ParamSpec& spec : model.specs()) {
    std::vector<double>* out = spec.role == model::ParamRole::sinks    ? &e.sink_logit
                               : spec.role == model::ParamRole::k_bias ? &e.k_bias_norm
                               : spec.role == model::ParamRole::v_bias ? &e.v_bias_norm
                                                                       : nullptr;
    if (out == nullptr || spec.layer < 0) continue;
    if (out->empty()) out->assign(size_t(n_layers * n_heads), std::numeric_limits<double>::quiet_NaN());
    std::vector<float> values(size_t(spec.numel));
    Tensor host = Tensor::contiguous_view(values.data(), DType::f32, spec.shape.data(), int(spec.shape.size()),
                                          Device::cpu());
    ops::copy(host, model.param(spec.name));
    // sinks [H]: one number a head; k_bias [H|1, d_a], v_bias [H|1, dh]: one row a head, or one for all
    const int64_t rows = spec.role == model::ParamRole::sinks ? spec.numel : spec.shape[0];
    const int64_t width = spec.numel / rows;
    for (int64_t h = 0; h < n_heads; ++h) {
      const float* row = values.data() + (rows == 1 ? 0 : h) * width;
      double value = row[0];
      if (spec.role != model::ParamRole::sinks) {
        double squares = 0.0;
        for (int64_t c = 0; c < width; ++c) squares += double(row[c]) * double(row[c]);
        value = std::sqrt(squares);
      }
      (*out)[size_t(spec.layer * n_heads + h)] = value;
    }
  }
}

}  // namespace

// Validation loss on the first --eval-rows rows of --valid-data and the sink probe on the first
// --probe-sequences rows cut to --probe-length tokens (held out), both split across ranks; for runs
// with a data intervention, the probe again with it applied to those rows (resampled draws keyed by
// kProbeSampleBase + row: fixed for the run, apart from every training sample's).
Evaluation Evaluator::run(model::Transformer& model) {
  const Device device = model.device();
  auto on_model_device = [&](Tensor host_ids, int slot) { return staged_copy(ids_stage_[slot], host_ids, device); };
  const int64_t C = cfg_.model.context, rows = cfg_.micro_batch_rows;
  const int rank = world_.rank(), world_size = world_.size();
  Evaluation e;
  std::vector<int32_t> chunk(size_t(C) + 1);
  // loss sum, counted targets; BBM: copy loss sum, copy positions, bigram loss sum, bigram positions
  double sums[6] = {0.0, 0.0, 0.0, 0.0, 0.0, 0.0};
  for (int64_t first = rank * rows; first < cfg_.eval_rows; first += rows * world_size) {
    const int64_t n = std::min(rows, cfg_.eval_rows - first);
    Tensor in = inputs_buf_.view(DType::i32, {n, C}), tg = targets_buf_.view(DType::i32, {n, C});
    Tensor losses = losses_buf_.view(DType::f32, {n, C});
    for (int64_t r = 0; r < n; ++r) {
      valid_data_.read_chunk(uint64_t(first + r), chunk.data());
      std::copy(chunk.begin(), chunk.end() - 1, in.ptr<int32_t>() + r * C);
      std::copy(chunk.begin() + 1, chunk.end(), tg.ptr<int32_t>() + r * C);
    }
    int64_t counted = 0;
    sums[0] += model.forward_loss(on_model_device(in, 0), on_model_device(tg, 1), &counted,
                                  bbm_ ? losses : Tensor{});
    sums[1] += double(counted);
    if (!bbm_) continue;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t i = 1; i < C; ++i) {
        const size_t at = size_t(r * C + i);
        const int32_t input = in.ptr<int32_t>()[at], target = tg.ptr<int32_t>()[at];
        if (bbm_->is_boundary(input) || target == bbm_->delimiter_id) continue;  // not a BBM prediction
        const int kind = bbm_->is_trigger(input) ? 2 : 4;  // copy : bigram
        sums[kind] += losses.ptr<float>()[at];
        sums[kind + 1] += 1.0;
      }
  }
  if (world_size > 1) world_.allreduce_sum(sums, 6);
  e.valid_loss = sums[0] / sums[1];
  const double nan = std::numeric_limits<double>::quiet_NaN();
  e.copy_loss = sums[3] > 0 ? sums[2] / sums[3] : nan;
  e.bigram_loss = sums[5] > 0 ? sums[4] / sums[5] : nan;

  const int64_t T = cfg_.probe_length;
  Tensor probe_inputs = probe_buf_.view(DType::i32, {rows, T});
  auto run_probe = [&](bool intervened) {
    probe::ModelProbe probe(cfg_.model.n_layers, cfg_.model.n_heads, T, cfg_.probe_max_k, cfg_.sink_eps,
                            probe::ProbeMask{cfg_.model.attn_window, cfg_.model.prefix_length}, bbm_ ? 2 : 1);
    for (int64_t first = rank * rows; first < cfg_.probe_sequences; first += rows * world_size) {
      const int64_t n = std::min(rows, cfg_.probe_sequences - first);
      for (int64_t r = 0; r < n; ++r) {
        valid_data_.read_chunk(uint64_t(first + r), chunk.data());
        if (intervened) apply_interventions(train_data_config_, kProbeSampleBase + uint64_t(first + r), chunk.data(), C + 1);
        std::copy(chunk.begin(), chunk.begin() + T, probe_inputs.ptr<int32_t>() + r * T);
      }
      probe.set_query_groups(query_groups(probe_inputs.slice(0, 0, n)));
      probe.set_marked_keys(marked_keys(probe_inputs.slice(0, 0, n)));
      // A model on a GPU reports device taps, one under --precision bf16 bf16 taps: HostTaps copies them to the
      // f32 host tensors the probe reads.
      probe::HostTaps host_taps(probe);
      const bool host_f32 = model.device().is_cpu() && model.act_dtype() == DType::f32;
      LayerObserver& observer = host_f32 ? static_cast<LayerObserver&>(probe) : host_taps;
      model.forward_observe(on_model_device(probe_inputs.slice(0, 0, n), 0), observer);
    }
    if (world_size > 1) probe.reduce([&](double* data, size_t count) { world_.allreduce_sum(data, count); });
    return probe.result();
  };
  e.probe = run_probe(false);
  if (cfg_.fixed_token_position > 0 || !cfg_.resample_positions.empty()) e.probe_intervened = run_probe(true);
  read_sink_parameters(model, cfg_.model.n_layers, cfg_.model.n_heads, e);
  return e;
}

void Evaluator::describe(io::ResultsFile& results, const std::string& group) const {
  results.create_group(group);
  std::string eps_list;
  for (double eps : cfg_.sink_eps) eps_list += strfmt("%s%g", eps_list.empty() ? "" : ",", eps);
  results.set_attr(group, "sink_eps", eps_list);
  if (cfg_.fixed_token_position > 0 || !cfg_.resample_positions.empty())  // what the *_intervened datasets measured
    results.set_attr(group, "intervention", ChunkSampler::intervention_text_of(train_data_config_).substr(1));
  // The groups of first_attention / first_weight_raw / rest_weight_raw's last axis.
  results.set_attr(group, "query_groups", std::string(bbm_ ? "non-trigger,trigger" : "all"));
  if (bbm_) {
    std::string ids;
    for (int32_t id : bbm_->trigger_ids) ids += strfmt("%s%d", ids.empty() ? "" : ",", id);
    results.set_attr(group, "bbm_trigger_ids", ids);
    results.set_attr(group, "bbm_meta", cfg_.bbm_meta);
  }
}

void Evaluator::log(int64_t n_done, const Evaluation& e) const {
  std::string sinks;
  for (size_t i = 0; i < cfg_.sink_eps.size(); ++i)
    sinks += strfmt("%sSink_1^%.1f %.2f%%", i ? ", " : "", cfg_.sink_eps[i], e.probe.sink[i]);
  for (size_t i = 0; i < e.probe.sink_star.size(); ++i)
    sinks += strfmt(", Sink_*^%.1f %.2f%%", cfg_.sink_eps[i], e.probe.sink_star[i]);
  auto largest = [](const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); };
  if (!e.probe.sink_logit_share.empty()) sinks += strfmt(", sink logit's share (max) %.3f", largest(e.probe.sink_logit_share));
  if (!e.sink_logit.empty()) sinks += strfmt(", S_h (max) %.3f", largest(e.sink_logit));
  if (e.probe_intervened) {  // where the intervention puts a token, its Sink_k at the middle threshold
    const size_t mid = cfg_.sink_eps.size() / 2;
    for (int64_t k = 1; k <= cfg_.probe_max_k; ++k)
      if (k == cfg_.fixed_token_position || std::count(cfg_.resample_positions.begin(), cfg_.resample_positions.end(), k))
        sinks += strfmt(", Sink_%lld^%.1f with the intervention %.2f%%", (long long)k, cfg_.sink_eps[mid],
                        e.probe_intervened->sink_k[size_t(k - 1) * cfg_.sink_eps.size() + mid]);
  }
  log::info0("eval step %lld | valid loss %.4f | %s | massive ratio (last layer) %.2f", (long long)n_done,
             e.valid_loss, sinks.c_str(), e.probe.massive_ratio.back());
  if (!bbm_) return;
  // Guo's BOS attention per layer (non-trigger queries; the head with the most where H > 1), and without
  // document rows the attention to BOS / <d> inside the rows.
  const int H = cfg_.model.n_heads;
  auto by_layer = [&](const std::vector<double>& values, size_t stride) {
    std::string text;
    for (int l = 0; l < cfg_.model.n_layers; ++l) {
      double best = 0.0;
      for (int h = 0; h < H; ++h) best = std::max(best, values[size_t(l * H + h) * stride]);
      text += strfmt("%s%.3f", l ? ", " : "", best);
    }
    return text;
  };
  std::string where = cfg_.document_rows ? "BOS" : "the first token";
  std::string text = strfmt("attention of non-trigger queries to %s by layer %s", where.c_str(),
                            by_layer(e.probe.first_attention, 2).c_str());
  if (!e.probe.marked_attention.empty())
    text += " | to BOS and <d> inside the rows " + by_layer(e.probe.marked_attention, 1);
  log::info0("eval step %lld | bbm: copy loss %.4f | bigram loss %.4f | %s", (long long)n_done, e.copy_loss,
             e.bigram_loss, text.c_str());
}

void Evaluator::write(io::ResultsFile& results, const std::string& g, int64_t n_done, const Evaluation& e) const {
  const int64_t L = cfg_.model.n_layers, H = cfg_.model.n_heads, K = cfg_.probe_max_k;
  const int64_t E = int64_t(cfg_.sink_eps.size()), G = e.probe.n_query_groups;
  std::vector<io::Cell> row = {io::Cell("step", n_done), io::Cell("valid_loss", e.valid_loss)};
  if (bbm_) {
    row.emplace_back("copy_loss", e.copy_loss);
    row.emplace_back("bigram_loss", e.bigram_loss);
  }
  results.append_row(g, row);
  results.append_slab(g + "/sink", {E}, e.probe.sink.data());  // [step, eps], %
  results.append_slab(g + "/alpha", {L, H}, e.probe.alpha.data());
  results.append_slab(g + "/alpha_k", {L, H, K}, e.probe.alpha_k.data());  // [step, L, H, K]
  results.append_slab(g + "/sink_k", {K, E}, e.probe.sink_k.data());       // [step, K, eps], %
  results.append_slab(g + "/massive_ratio", {L}, e.probe.massive_ratio.data());
  // The first token's hidden-state and value norms beside the others' (the massive activation and the
  // small value of a sink token), and the attention to it by query group (model_probe.hpp).
  results.append_slab(g + "/hnorm_first", {L}, e.probe.hnorm_first.data());  // [step, L]
  results.append_slab(g + "/hnorm_rest", {L}, e.probe.hnorm_rest.data());
  results.append_slab(g + "/vnorm_first", {L}, e.probe.vnorm_first.data());
  results.append_slab(g + "/vnorm_rest", {L}, e.probe.vnorm_rest.data());
  results.append_slab(g + "/first_attention", {L, H, G}, e.probe.first_attention.data());  // [step, L, H, G]
  results.append_slab(g + "/first_weight_raw", {L, H, G}, e.probe.first_weight_raw.data());
  results.append_slab(g + "/rest_weight_raw", {L, H, G}, e.probe.rest_weight_raw.data());
  if (bbm_ && !cfg_.document_rows) {  // attention to BOS / <d> inside the rows (NaN: no row had one)
    std::vector<double> marked = e.probe.marked_attention;
    if (marked.empty()) marked.assign(size_t(L * H), std::numeric_limits<double>::quiet_NaN());
    results.append_slab(g + "/boundary_attention", {L, H}, marked.data());  // [step, L, H]
  }
  results.set_attr(g, "proxy_scores", int64_t(e.probe.proxy_scores));  // Sink_1 of proxy scores (Table 6 "*")
  if (!e.probe.sink_star.empty()) {  // attention to the bias position (sink token x* or k*), Tables 4-5
    results.append_slab(g + "/sink_star", {E}, e.probe.sink_star.data());
    results.append_slab(g + "/alpha_star", {L, H}, e.probe.alpha_star.data());
  }
  // Where a learned sink can sit besides the first token: the sink logit's share of the rows and S_h itself
  // (sink logit, softmax-plus-one: share only), ||k*||, ||v*|| (KV / K / V biases).
  const std::pair<const char*, const std::vector<double>*> sink_parts[] = {
      {"sink_logit_share", &e.probe.sink_logit_share}, {"sink_logit", &e.sink_logit},
      {"k_bias_norm", &e.k_bias_norm}, {"v_bias_norm", &e.v_bias_norm}};
  for (const auto& [name, values] : sink_parts)
    if (!values->empty()) results.append_slab(g + "/" + name, {L, H}, values->data());  // [step, L, H]
  if (!e.probe.massive_ratio_pre_norm.empty())  // post-norm: before each block's last norm (Fig. 7 left)
    results.append_slab(g + "/massive_ratio_pre_norm", {L}, e.probe.massive_ratio_pre_norm.data());
  // Sliding window: alpha_k / Sink_k relative to each query's window start (Fig. 6 middle); prefix LM:
  // alpha and Sink of every position (Fig. 5 middle). Definitions: probe/sink_metrics.hpp.
  if (!e.probe.alpha_k_window.empty()) {
    const int64_t Kw = int64_t(e.probe.sink_k_window.size()) / E;
    results.append_slab(g + "/alpha_k_window", {L, H, Kw}, e.probe.alpha_k_window.data());  // [step, L, H, Kw]
    results.append_slab(g + "/sink_k_window", {Kw, E}, e.probe.sink_k_window.data());       // [step, Kw, eps], %
    results.set_attr(g, "window", int64_t(cfg_.model.attn_window));
  }
  if (!e.probe.alpha_pos.empty()) {
    const int64_t T = cfg_.probe_length;
    results.append_slab(g + "/alpha_pos", {L, H, T}, e.probe.alpha_pos.data());  // [step, L, H, T]
    results.append_slab(g + "/sink_pos", {T, E}, e.probe.sink_pos.data());       // [step, T, eps], %
    results.set_attr(g, "prefix", int64_t(cfg_.model.prefix_length));
  }
  if (e.probe_intervened) {  // the probe sequences with the run's own data intervention (attr "intervention")
    results.append_slab(g + "/alpha_k_intervened", {L, H, K}, e.probe_intervened->alpha_k.data());
    results.append_slab(g + "/sink_k_intervened", {K, E}, e.probe_intervened->sink_k.data());
  }
}

}  // namespace sinklab::train
