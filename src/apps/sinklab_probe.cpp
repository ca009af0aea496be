// sinklab-probe: the attention-sink metrics of a saved sinklab checkpoint, written into HDF5 under
// /models/<name>/<input>/<domain> (docs/DESIGN.md, "HDF5 results"): alpha[L,H,K], sink[eps], massive_ratio[L].
//   sinklab-probe --checkpoint results/run/checkpoints --data data/mini/valid.bin --out results/probe.h5
#include <boost/program_options.hpp>
#include <filesystem>
#include <iostream>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/options.hpp"
#include "core/text.hpp"
#include "io/h5.hpp"
#include "io/shard.hpp"
#include "model/transformer.hpp"
#include "probe/host_taps.hpp"
#include "probe/inputs.hpp"
#include "probe/model_probe.hpp"
#include "probe/shared_options.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"

namespace po = boost::program_options;
using namespace sinklab;

namespace {

struct ProbeOptions {
  std::string checkpoint, data, out, name, domain, input, resample_positions;
  probe::SharedOptions shared;  // --config, --device, --attn-kernel, --sink-eps
  int64_t fixed_token_position = 0, fixed_token_id = 0;
  uint64_t run_seed = 1234;
  int64_t sequences = 100, length = 64, stride = 0, batch = 16;
  int max_k = 8;
  uint64_t seed = 1234;
};

bool parse(int argc, char** argv, ProbeOptions& o) {
  po::options_description desc("sinklab-probe options (also valid as `name = value` lines in --config)");
  desc.add_options()
      ("checkpoint", po::value(&o.checkpoint)->required(), "a step_<N> checkpoint directory, or a directory of them (newest is used)")
      ("data", po::value(&o.data), "held-out token shard (natural inputs)")
      ("input", po::value(&o.input)->default_value("natural"), "natural | random | repeat")
      ("sequences", po::value(&o.sequences)->default_value(100), "number of sequences")
      ("length", po::value(&o.length)->default_value(64), "tokens per sequence (T)")
      ("stride", po::value(&o.stride)->default_value(0), "natural: distance between sequence starts (0 = the model's context)")
      ("max-k", po::value(&o.max_k)->default_value(8), "positions k = 1..K whose alpha_k and Sink_k^eps are stored")
      ("batch", po::value(&o.batch)->default_value(16), "sequences per forward pass")
      ("seed", po::value(&o.seed)->default_value(1234), "seed of random/repeat inputs")
      ("out", po::value(&o.out)->required(), "HDF5 results file of the probe: created, or extended when "
       "sinklab-probe made it (a training run's results.h5 or a survey's file is refused)")
      ("name", po::value(&o.name)->default_value(""), "model name in the file (default: <run directory>_<step directory>)")
      ("domain", po::value(&o.domain)->default_value("mixed"), "domain label of the inputs")
      // The run's own data intervention, as sinklab-pretrain's evaluation applies it (its *_intervened probe).
      ("fixed-token-position", po::value(&o.fixed_token_position)->default_value(0),
       "the run's --fixed-token-position: this position of every sequence holds --fixed-token-id (0 = none)")
      ("fixed-token-id", po::value(&o.fixed_token_id)->default_value(0), "the run's --fixed-token-id")
      ("resample-positions", po::value(&o.resample_positions)->default_value(""),
       "the run's --resample-positions: these positions redrawn as the trainer's probe draws them")
      ("run-seed", po::value(&o.run_seed)->default_value(1234), "the run's --seed (keys the resampled draws)");
  desc.add(probe::shared_options(o.shared));
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm)) return false;
  o.shared.device_kind();  // bad values fail before any file is read
  o.shared.attention_kernel();
  return true;
}

// The probe's inputs [sequences, length]: natural rows of --data, or random / repeated tokens.
void make_inputs(const ProbeOptions& o, const model::ModelConfig& cfg, Tensor inputs) {
  const probe::InputMode mode = probe::parse_input_mode(o.input);
  if (mode == probe::InputMode::natural) {
    SL_CHECK(!o.data.empty(), "--input natural needs --data SHARD");
    io::Shard shard(o.data);
    SL_CHECK(shard.header().vocab_size <= uint32_t(cfg.vocab_size), "%s: vocabulary %u exceeds the model's %d",
             o.data.c_str(), shard.header().vocab_size, cfg.vocab_size);
    probe::natural_inputs(inputs, shard, o.stride > 0 ? o.stride : cfg.context);
    return;
  }
  // Special tokens are excluded (paper Sec. 3.3): the shards' EOS/BOS when --data names one.
  std::vector<uint32_t> specials;
  if (!o.data.empty()) {
    io::Shard shard(o.data, false);
    specials.push_back(shard.header().eos_id);
    if (shard.header().bos_id != io::kNoBos) specials.push_back(shard.header().bos_id);
  }
  if (mode == probe::InputMode::random) probe::random_inputs(inputs, uint32_t(cfg.vocab_size), specials, o.seed);
  else probe::repeat_inputs(inputs, uint32_t(cfg.vocab_size), specials, o.seed);
}

// Sequence i carries the run's intervention as the trainer's probe of validation chunk i does. Returns
// the intervention (none: no fixed token and no resampled positions).
train::DataConfig apply_run_intervention(const ProbeOptions& o, const model::ModelConfig& cfg, Tensor inputs) {
  train::DataConfig intervention;
  intervention.seed = o.run_seed;
  intervention.resample_vocab = uint32_t(cfg.vocab_size);
  intervention.fixed_token_position = o.fixed_token_position;
  intervention.fixed_token_id = int32_t(o.fixed_token_id);
  for (double p : parse_number_list(o.resample_positions, "resample-positions")) {
    SL_CHECK(p == double(int64_t(p)) && p >= 1 && p <= o.length, "--resample-positions: %g is not a position in [1, --length]", p);
    intervention.resample_positions.push_back(int64_t(p));
  }
  SL_CHECK(o.fixed_token_position >= 0 && o.fixed_token_position <= o.length,
           "--fixed-token-position must lie in [0, --length]");
  SL_CHECK(o.fixed_token_id >= 0 && o.fixed_token_id < cfg.vocab_size, "--fixed-token-id must lie in [0, %d)", cfg.vocab_size);
  const bool intervened = o.fixed_token_position > 0 || !intervention.resample_positions.empty();
  for (int64_t i = 0; intervened && i < o.sequences; ++i)
    train::apply_interventions(intervention, train::kProbeSampleBase + uint64_t(i), inputs.ptr<int32_t>() + i * o.length,
                               o.length);
  return intervention;
}

// The probe's arrays and attributes under /models/<name>/<input>/<domain> (docs/DESIGN.md, "HDF5 results").
void write_probe_group(io::ResultsFile& out, const std::string& g, const ProbeOptions& o, const model::ModelConfig& cfg,
                       const model::Transformer& model, const probe::ProbeResult& r, const std::vector<double>& eps) {
  out.create_group(g);
  out.write_array(g + "/alpha", {cfg.n_layers, cfg.n_heads, o.max_k}, r.alpha_k.data());
  out.write_array(g + "/sink", {int64_t(eps.size())}, r.sink.data());
  out.write_array(g + "/sink_k", {int64_t(o.max_k), int64_t(eps.size())}, r.sink_k.data());  // [K, eps]
  out.write_array(g + "/sink_eps", {int64_t(eps.size())}, eps.data());
  out.write_array(g + "/massive_ratio", {cfg.n_layers}, r.massive_ratio.data());
  if (!r.sink_star.empty()) {
    out.write_array(g + "/sink_star", {int64_t(eps.size())}, r.sink_star.data());
    out.write_array(g + "/alpha_star", {cfg.n_layers, cfg.n_heads}, r.alpha_star.data());
  }
  if (!r.massive_ratio_pre_norm.empty())
    out.write_array(g + "/massive_ratio_pre_norm", {cfg.n_layers}, r.massive_ratio_pre_norm.data());
  // Mask-relative metrics (probe/sink_metrics.hpp): sliding window, relative to each query's window start;
  // prefix LM, alpha and Sink of every position.
  if (!r.alpha_k_window.empty()) {
    const int64_t Kw = int64_t(r.sink_k_window.size() / eps.size());
    out.write_array(g + "/alpha_window", {cfg.n_layers, cfg.n_heads, Kw}, r.alpha_k_window.data());
    out.write_array(g + "/sink_k_window", {Kw, int64_t(eps.size())}, r.sink_k_window.data());  // [Kw, eps]
    out.set_attr(g, "window", int64_t(cfg.attn_window));
  }
  if (!r.alpha_pos.empty()) {
    out.write_array(g + "/alpha_pos", {cfg.n_layers, cfg.n_heads, o.length}, r.alpha_pos.data());
    out.write_array(g + "/sink_pos", {o.length, int64_t(eps.size())}, r.sink_pos.data());  // [T, eps]
    out.set_attr(g, "prefix", int64_t(cfg.prefix_length));
  }
  // Parameter counts (Fig. 4 left): all, and without the word embedding and unembedding.
  out.set_attr(g, "n_params", model.num_parameters());
  out.set_attr(g, "n_params_non_embedding", model.num_parameters_non_embedding());
  out.set_attr(g, "n_seq", o.sequences);
  out.set_attr(g, "proxy_scores", int64_t(r.proxy_scores));
  out.set_attr(g, "T", o.length);
}

// Probe results go to a file of their own: an existing --out must be one sinklab-probe made. A training run's
// results.h5 (its /runs is one run's record, which the report and --resume read) or a survey's file (its
// /items are the survey's bookkeeping) is refused before the model is loaded, rather than extended.
void check_probe_output(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return;
  const io::ResultsFile f = io::ResultsFile::open_read(path);
  const std::string writer = f.has_attr("/", "command_line") ? f.attr_string("/", "command_line") : "";
  const std::string what = f.exists("/runs")                      ? "a training run's results file (it holds /runs)"
                           : f.has_attr("/", "survey_params")     ? "a survey's results file (it has survey_params)"
                           : writer == "sinklab-probe"            ? ""
                                                                  : "not a sinklab-probe results file";
  SL_CHECK(what.empty(), "--out %s is %s: probe results go to a file of their own (give a new path, or one "
           "sinklab-probe wrote)", path.c_str(), what.c_str());
}

int run(const ProbeOptions& o) {
  check_probe_output(o.out);
  log::info("CPU BLAS: %s", cpu_blas_summary().c_str());
  const std::string path = train::resolve_checkpoint(o.checkpoint, "--checkpoint");
  train::CheckpointInfo ckpt = train::open_checkpoint(path);
  model::ModelConfig cfg = model::ModelConfig::from_hf_config_json(train::read_config_json(ckpt), path + "/config.json");
  SL_CHECK(o.length >= 1 && o.length <= cfg.context, "--length must lie in [1, %d] (the model's context)", cfg.context);
  SL_CHECK(o.max_k >= 1 && o.max_k <= o.length, "--max-k must lie in [1, --length]");
  SL_CHECK(o.sequences >= 1 && o.batch >= 1, "--sequences and --batch must be positive");
  const Device device = device_from_flag(o.shared.device, "--device", [](int) { return 0; });
  if (device.is_cuda()) log::info("device: %s (%s)", device.name().c_str(), backend_for(device).device_name().c_str());
  model::Transformer model(cfg, device);
  model.set_attention_kernel(o.shared.attention_kernel());
  model.attention_kernel();  // a kernel that cannot run this model's attention fails here, naming --attn-kernel
  std::vector<io::NamedTensor> weights;
  for (const auto& spec : model.specs()) weights.push_back({spec.name, model.param(spec.name)});
  train::load_weights(ckpt, weights);

  Buffer buf = Buffer::for_tensor(DType::i32, {o.sequences, o.length});
  Tensor inputs = buf.view(DType::i32, {o.sequences, o.length});
  make_inputs(o, cfg, inputs);
  const train::DataConfig intervention = apply_run_intervention(o, cfg, inputs);
  const bool intervened = o.fixed_token_position > 0 || !intervention.resample_positions.empty();

  const std::vector<double> eps = o.shared.thresholds();
  probe::ModelProbe probe(cfg.n_layers, cfg.n_heads, o.length, o.max_k, eps,
                          probe::ProbeMask{cfg.attn_window, cfg.prefix_length});
  if (cfg.attn_window > 0 && !probe.measures_window())
    log::warn("the model's window (%d keys) exceeds --length %lld: no query has a full window, alpha_k_window is not measured",
              cfg.attn_window, (long long)o.length);
  // A model on a GPU: its token ids copied up per pass, its taps copied down for the probe (HostTaps).
  Buffer device_inputs;
  probe::HostTaps host_taps(probe);
  LayerObserver& observer = device.is_cpu() ? static_cast<LayerObserver&>(probe) : host_taps;
  for (int64_t first = 0; first < o.sequences; first += o.batch) {
    const int64_t n = std::min(o.batch, o.sequences - first);
    model.forward_observe(staged_copy(device_inputs, inputs.slice(0, first, n), device), observer);
    log::info("probe: %lld/%lld sequences", (long long)(first + n), (long long)o.sequences);
  }
  probe::ProbeResult r = probe.result();

  const std::string name = o.name.empty() ? std::filesystem::path(path).parent_path().parent_path().filename().string() + "_" +
                                                std::filesystem::path(path).filename().string()
                                          : o.name;
  const std::filesystem::path out_dir = std::filesystem::path(o.out).parent_path();
  std::error_code ec;
  if (!out_dir.empty()) std::filesystem::create_directories(out_dir, ec);
  SL_CHECK(!ec, "--out: cannot create %s: %s", out_dir.c_str(), ec.message().c_str());
  io::RootInfo info{SINKLAB_VERSION, "", io::now_utc_iso(), "sinklab-probe", "", cpu_blas_summary()};
  io::ResultsFile out = io::ResultsFile::open_or_create(o.out, info);
  const std::string g = "/models/" + name + "/" + o.input + "/" + o.domain;
  write_probe_group(out, g, o, cfg, model, r, eps);
  // bos = 0: nothing is prepended to the probe's rows (not a token id, unlike the survey's bos, whose "no
  // prefix" is -1; docs/DESIGN.md, "HDF5 results").
  out.set_attr(g, "bos", int64_t(0));
  out.set_attr(g, "checkpoint", path);
  if (intervened) out.set_attr(g, "intervention", train::ChunkSampler::intervention_text_of(intervention).substr(1));
  out.commit();
  std::string line;
  for (size_t i = 0; i < eps.size(); ++i) line += strfmt("%sSink_1^%g = %.2f%%", i ? ", " : "", eps[i], r.sink[i]);
  log::info("%s [%s/%s]: %s -> %s", name.c_str(), o.input.c_str(), o.domain.c_str(), line.c_str(), o.out.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return run_main("sinklab-probe", [&] {
    ProbeOptions o;
    if (!parse(argc, argv, o)) return 0;
    return run(o);
  });
}
