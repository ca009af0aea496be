#include "train/train_config.hpp"

#include <boost/program_options.hpp>

#include "backend/attention_dispatch.hpp"
#include "model/transformer.hpp"
#include "core/error.hpp"
#include "core/options.hpp"
#include "core/text.hpp"
#include "probe/shared_options.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"

#include <algorithm>
#include <cmath>
#include <set>
#include <sstream>

namespace sinklab::train {

namespace po = boost::program_options;

namespace {

// sinklab-sft: the model is --init-from's (its config.json). A model flag given (on the command line or
// in --config) with another value than the checkpoint's is refused with one line naming it.
void take_model_from_checkpoint(TrainConfig& c, const po::variables_map& vm) {
  c.init_from = resolve_checkpoint(c.init_from, "--init-from");
  const CheckpointInfo info = open_checkpoint(c.init_from);
  const model::ModelConfig theirs =
      model::ModelConfig::from_hf_config_json(read_config_json(info), info.path + "/" + kCheckpointConfig);
  const auto their_settings = theirs.settings(), asked = c.model.settings();
  for (size_t i = 0; i < asked.size(); ++i) {
    const std::string& flag = asked[i].first;
    if (!vm.count(flag) || vm[flag].defaulted()) continue;
    SL_CHECK(asked[i].second == their_settings[i].second,
             "--%s: sinklab-sft takes the model from --init-from, whose %s = '%s', but this job asks for '%s' (drop "
             "the flag)", flag.c_str(), flag.c_str(), their_settings[i].second.c_str(), asked[i].second.c_str());
  }
  c.model = theirs;
}

// The flags parse_train_config reads as text before it checks and converts them.
struct FlagText {
  std::string train_data, valid_data, resample_positions, eval_every_after;
  probe::SharedOptions shared;  // --config, --device, --attn-kernel, --sink-eps
};

// The model's size flags and the validation data (sinklab-sft: the model's flags are optional, since the
// checkpoint has the model; given, they must agree with it).
void add_model_options(po::options_description& desc, TrainConfig& c, FlagText& text, bool sft) {
  model::ModelConfig& m = c.model;
  const auto model_value = [&](int* v) {
    auto* value = po::value(v);
    return sft ? value : value->required();
  };
  desc.add_options()
      // model
      ("vocab-size", model_value(&m.vocab_size), "vocabulary size (>= the shards' vocab)")
      ("d-model", model_value(&m.d_model), "hidden dimension d")
      ("n-layers", model_value(&m.n_layers), "transformer blocks L")
      ("n-heads", model_value(&m.n_heads), "attention heads H")
      ("n-kv-heads", po::value(&m.n_kv_heads)->default_value(0), "key/value heads (0 = n-heads)")
      ("ffn-hidden", model_value(&m.ffn_hidden), "SwiGLU hidden width")
      ("context", model_value(&m.context), "context length C (tokens per training row)")
      ("rope-theta", po::value(&m.rope_theta)->default_value(10000.0), "rotary base")
      ("norm-eps", po::value(&m.norm_eps)->default_value(1e-5), "RMSNorm epsilon")
      ("valid-data", po::value(&text.valid_data)->required(),
       sft ? "validation shard(s) of pre-training, comma-separated: validation loss and the sink probe (the same "
             "probe set before and after fine-tuning)"
           : "validation shard(s), comma-separated");
}

// The training data: sinklab-sft's checkpoint and SFT rows, or sinklab-pretrain's shards, their
// interventions and row kind; and the number of steps.
void add_data_options(po::options_description& desc, TrainConfig& c, FlagText& text, bool sft) {
  if (sft) {
    desc.add_options()
      ("init-from", po::value(&c.init_from)->required(),
       "the checkpoint to fine-tune: a step_<N> directory, or a run's --out-dir (its newest checkpoint); its weights "
       "and model, a fresh optimizer")
      ("sft-data", po::value(&c.sft_data)->required(), "data_prep sft output (tokens + assistant loss mask, HDF5)")
      ("steps", po::value(&c.steps)->default_value(0), "optimizer steps (0 = one epoch of --sft-data)");
    return;
  }
  desc.add_options()
      ("train-data", po::value(&text.train_data)->required(), "training shard(s), comma-separated")
      ("max-train-tokens", po::value(&c.max_train_tokens)->default_value(0), "use only the first N training tokens (0 = all)")
      ("resample-positions", po::value(&text.resample_positions)->default_value(""),
       "1-based positions of every training chunk whose token is redrawn uniformly from [0, --vocab-size) for each "
       "sample, e.g. 1 or 1,2 (Sec. 5; validation and probe data are not changed)")
      ("fixed-token-position", po::value(&c.fixed_token_position)->default_value(0),
       "1-based position of every training chunk that always holds --fixed-token-id (0 = off; Table 10 right)")
      ("fixed-token-id", po::value(&c.fixed_token_id)->default_value(0), "the token of --fixed-token-position")
      ("document-rows", po::value(&c.document_rows)->default_value(false)->implicit_value(true),
       "every training and validation row is the start of one document, not a cut of the packed stream (fixed-length "
       "sequences that start with BOS, such as data_prep bbm's; each document needs --context + 1 tokens)")
      ("bbm-meta", po::value(&c.bbm_meta)->default_value(""),
       "data_prep bbm's bbm.json (the Bigram-Backcopy task): evaluations also split the validation loss into copy and "
       "bigram positions and the first token's attention into non-trigger and trigger queries")
      ("init-weights", po::value(&c.init_from)->default_value(""),
       "start from these weights instead of drawing them: a .safetensors file, a step_<N> checkpoint directory, or a "
       "run's --out-dir (its newest checkpoint), whose tensors must have the model's names and shapes; a fresh "
       "optimizer (e.g. one draw for every variant of a comparison, or another implementation's, bench/guo/)")
      ("steps", po::value(&c.steps)->required(), "optimizer steps");
}

// The stability monitor and the optimisation.
void add_optimizer_options(po::options_description& desc, TrainConfig& c) {
  desc.add_options()
      // stability monitor
      ("on-nonfinite", po::value(&c.on_nonfinite)->default_value("halt"),
       "a step whose loss or gradient norm is not finite: skip (no update, counted) | halt (exit non-zero; the last "
       "checkpoint stays)")
      ("spike-sigma", po::value(&c.spike_sigma)->default_value(6.0),
       "k: a loss or grad norm above mean + k std of the last --spike-window steps is a spike event")
      ("spike-window", po::value(&c.spike_window)->default_value(50), "steps in the spike detector's running window")
      // optimisation
      ("global-batch-tokens", po::value(&c.global_batch_tokens)->required(), "tokens per optimizer step (all ranks)")
      ("micro-batch-rows", po::value(&c.micro_batch_rows)->required(), "rows of C tokens per forward/backward per rank")
      ("lr", po::value(&c.lr)->default_value(4e-4), "peak learning rate")
      ("min-lr", po::value(&c.min_lr)->default_value(0.0), "final learning rate of the cosine schedule")
      ("warmup-steps", po::value(&c.warmup_steps)->default_value(0), "linear warmup steps")
      ("lr-schedule", po::value(&c.lr_schedule)->default_value("constant"), "constant | cosine (after warmup)")
      ("beta1", po::value(&c.beta1)->default_value(0.9), "AdamW beta1")
      ("beta2", po::value(&c.beta2)->default_value(0.95), "AdamW beta2")
      ("adam-eps", po::value(&c.adam_eps)->default_value(1e-8), "AdamW epsilon")
      ("weight-decay", po::value(&c.weight_decay)->default_value(0.1), "decoupled weight decay (matrices only)")
      ("grad-clip", po::value(&c.grad_clip)->default_value(1.0), "global grad-norm clip (0 = off)")
      ("sink-lr-scale", po::value(&c.sink_lr_scale)->default_value(1.0),
       "learning-rate multiplier of the learned sink tensors: the sink token x*, k*, v*, the sink logits S_h")
      ("zero1", po::value(&c.zero1)->default_value(false), "shard the optimizer state across ranks (ZeRO-1)")
      ("grad-bucket-mb", po::value(&c.grad_bucket_mb)->default_value(25.0),
       "MiB of gradients per data-parallel bucket, reduced while backward runs (0 = one bucket per layer)")
      ("peak-tflops", po::value(&c.peak_tflops)->default_value(0.0),
       "the device's dense peak in TFLOP/s for MFU (0 = the GPU's known bf16 peak; none on CPU)")
      ("seed", po::value(&c.seed)->default_value(1234), "seed of initialisation and data order");
}

// The evaluations and the sink probe.
void add_evaluation_options(po::options_description& desc, TrainConfig& c, FlagText& text) {
  desc.add_options()
      // evaluation / probe
      ("eval-every", po::value(&c.eval_every)->default_value(0), "steps between evaluations (0 = end only)")
      ("eval-every-after", po::value(&text.eval_every_after)->default_value("off"),
       "STEP:N: from step STEP on, evaluate every N steps instead (a fine grid early, a coarse one later); off")
      ("eval-rows", po::value(&c.eval_rows)->default_value(16), "validation rows of C tokens per evaluation")
      ("probe-sequences", po::value(&c.probe_sequences)->default_value(100), "held-out sequences for the sink probe")
      ("probe-length", po::value(&c.probe_length)->default_value(64), "tokens per probe sequence (T)")
      ("probe-max-k", po::value(&c.probe_max_k)->default_value(4),
       "positions k = 1..K whose alpha_k and Sink_k^eps are stored (a sink moved off the first token)");
}

// Where the results go, checkpoints, how the attention's backward and the step run.
void add_output_options(po::options_description& desc, TrainConfig& c) {
  desc.add_options()
      // output
      ("out-dir", po::value(&c.out_dir)->default_value("results/run"), "checkpoints and results.h5 go here")
      ("run-name", po::value(&c.run_name)->default_value("run"), "name of the run in the HDF5 file")
      ("log-every", po::value(&c.log_every)->default_value(10), "steps between progress lines")
      ("checkpoint-every", po::value(&c.checkpoint_every)->default_value(0), "steps between checkpoints (0 = end only)")
      ("keep-checkpoints", po::value(&c.keep_checkpoints)->default_value(2), "checkpoints kept on disk")
      ("checkpoint-at-start", po::value(&c.checkpoint_at_start)->default_value(false)->implicit_value(true),
       "also checkpoint the initial weights (step 0), e.g. for another implementation to start from the same weights")
      ("record-batches", po::value(&c.record_batches)->default_value(false)->implicit_value(true),
       "store the rows every step read (results.h5, /runs/<run>/batches/rows [step, global rows]): with "
       "--checkpoint-at-start, enough to replay the run elsewhere (bench/twin)")
      ("resume", po::value(&c.resume)->default_value(false)->implicit_value(true), "continue from the newest checkpoint in --out-dir")
      ("overwrite", po::value(&c.overwrite)->default_value(false)->implicit_value(true),
       "a run without --resume in an --out-dir that holds another run's results.h5 or checkpoints: delete them "
       "(results.h5, checkpoints/, DONE; nothing else) instead of refusing")
      ("attn-deterministic", po::value(&c.attn_deterministic)->default_value(true),
       "attention backward with cuDNN's deterministic algorithm (same bits every run; false: its faster one)")
      ("fused-ops", po::value(&c.fused_ops)->default_value(true),
       "the step's fused ops where the model has them (pre-norm RMSNorm: residual add + norm in one op, forward and "
       "backward); false runs the op-by-op path they equal")
      ("recompute", po::value(&c.recompute)->default_value("none"),
       ("activations backward recomputes instead of keeping them: " + model::recompute_names() +
        " (attention: the attention block's mixing; block: every layer but its input); same gradients, less memory")
           .c_str())
      ("precision", po::value(&c.precision)->default_value("auto"),
       ("how activations are stored: auto (bf16 on cuda, fp32 on cpu) | " + model::precision_names() +
        " (bf16: every activation and its gradient in bf16, products on the weights' bf16 copy with f32 "
        "accumulation; f32 master weights, gradients, optimizer state, norm and softmax statistics and per-token "
        "losses; the CPU computes the same values)")
           .c_str())
      ("dry-run", po::value(&c.dry_run)->default_value(false)->implicit_value(true),
       "check the configuration and print it (every option with its value), then exit");
}

// Converts the text flags and checks every setting, in this order (the first failure is the message).
void check_train_config(TrainConfig& c, const FlagText& text, int world_size, bool sft) {
  model::ModelConfig& m = c.model;
  for (double p : parse_number_list(text.resample_positions, "resample-positions")) {
    SL_CHECK(p == double(int64_t(p)) && p >= 1 && p <= m.context,
             "--resample-positions: %g is not a position in [1, --context]", p);
    SL_CHECK(int64_t(p) != c.fixed_token_position, "--fixed-token-position %g is also in --resample-positions", p);
    c.resample_positions.push_back(int64_t(p));
  }
  SL_CHECK(c.fixed_token_position >= 0 && c.fixed_token_position <= m.context,
           "--fixed-token-position must lie in [0, --context]");
  SL_CHECK(c.fixed_token_id >= 0 && c.fixed_token_id < m.vocab_size, "--fixed-token-id must lie in [0, --vocab-size)");
  if (!sft) c.train_data = split_commas(text.train_data);
  c.valid_data = split_commas(text.valid_data);
  c.sink_eps = text.shared.thresholds();
  m.validate();
  SL_CHECK(sft || !c.train_data.empty(), "--train-data names no shard");
  SL_CHECK(!c.valid_data.empty(), "--valid-data names no shard");
  SL_CHECK(c.steps > 0 || (sft && c.steps == 0), sft ? "--steps must be >= 0" : "--steps must be positive");
  SL_CHECK(!(c.resume && c.overwrite), "--overwrite would delete the run that --resume continues: give one of them");
  SL_CHECK(c.on_nonfinite == "skip" || c.on_nonfinite == "halt", "--on-nonfinite must be skip or halt, not '%s'",
           c.on_nonfinite.c_str());
  SL_CHECK(c.spike_sigma > 0 && c.spike_window >= 2, "--spike-sigma must be positive and --spike-window >= 2");
  SL_CHECK(c.lr_schedule == "constant" || c.lr_schedule == "cosine", "--lr-schedule must be constant or cosine, not '%s'",
           c.lr_schedule.c_str());
  make_batch_layout(c.global_batch_tokens, m.context, c.micro_batch_rows, world_size);  // throws naming the flags
  SL_CHECK(c.lr > 0 && c.min_lr >= 0 && c.min_lr <= c.lr, "--lr must be positive and --min-lr in [0, lr]");
  SL_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "--beta1/--beta2 must lie in [0, 1)");
  SL_CHECK(c.weight_decay >= 0, "--weight-decay must be >= 0");
  SL_CHECK(c.sink_lr_scale > 0 && std::isfinite(c.sink_lr_scale), "--sink-lr-scale must be positive and finite");
  SL_CHECK(c.grad_bucket_mb >= 0, "--grad-bucket-mb must be >= 0");
  SL_CHECK(c.peak_tflops >= 0, "--peak-tflops must be >= 0");
  SL_CHECK(c.probe_length >= 1 && c.probe_length <= m.context, "--probe-length must lie in [1, --context]");
  SL_CHECK(c.probe_max_k >= 1 && c.probe_max_k <= c.probe_length, "--probe-max-k must lie in [1, --probe-length]");
  SL_CHECK(c.probe_sequences >= 0, "--probe-sequences must be >= 0");
  c.device = text.shared.device_kind();
  if (text.eval_every_after != "off") {
    const std::string& every_after = text.eval_every_after;
    const size_t colon = every_after.find(':');
    SL_CHECK(colon != std::string::npos, "--eval-every-after must be STEP:N or off, not '%s'", every_after.c_str());
    c.eval_coarse_from = parse_integer(every_after.substr(0, colon), "--eval-every-after");
    c.eval_coarse_every = parse_integer(every_after.substr(colon + 1), "--eval-every-after");
    SL_CHECK(c.eval_coarse_from >= 0 && c.eval_coarse_every >= 1,
             "--eval-every-after must be STEP:N with STEP >= 0 and N >= 1, not '%s'", every_after.c_str());
  }
  c.attn_kernel = text.shared.attn_kernel;
  text.shared.attention_kernel();         // throws naming --attn-kernel
  model::parse_recompute(c.recompute);    // throws naming --recompute
  if (c.precision == "auto") c.precision = c.device == DeviceKind::cuda ? "bf16" : "fp32";
  model::parse_precision(c.precision);    // throws naming --precision
}

// The effective configuration, every option with its value, as ini text (sorted by name); sinklab-sft's
// model lines are the checkpoint's.
std::string effective_config_text(const po::variables_map& vm, const model::ModelConfig& m, bool sft) {
  std::string text = options_as_ini(vm, {"config", "help", "dry-run", "describe", "overwrite"});
  if (!sft) return text;
  std::vector<std::string> lines;
  std::set<std::string> model_flags;
  for (const auto& [flag, value] : m.settings()) {
    lines.push_back(flag + " = " + value);
    model_flags.insert(flag);
  }
  std::istringstream ini(text);
  for (std::string line; std::getline(ini, line);)
    if (!line.empty() && !model_flags.count(line.substr(0, line.find(" = ")))) lines.push_back(line);
  std::sort(lines.begin(), lines.end());
  text.clear();
  for (const std::string& line : lines) text += line + "\n";
  return text;
}

}  // namespace

bool parse_train_config(int argc, char** argv, TrainConfig& c, int world_size, bool sft) {
  FlagText text;
  c.sft = sft;
  const char* program = sft ? "sinklab-sft" : "sinklab-pretrain";
  po::options_description desc(strfmt("%s options (also valid as `name = value` lines in --config)", program));
  // The model's variant axes (model/config.hpp), one option each, defaults = the paper's default model.
  const model::ModelConfig default_model;
  std::vector<std::pair<std::string, std::string>> axes = default_model.axes();
  po::options_description variant_desc("model variant axes (paper Secs. 6-7, App. C; see jobs/pretrain/INDEX.md)");
  for (auto& [flag, value] : axes)
    variant_desc.add_options()(flag.c_str(), po::value(&value)->default_value(value),
                                   model::ModelConfig::axis_help(flag));
  add_model_options(desc, c, text, sft);
  add_data_options(desc, c, text, sft);
  add_optimizer_options(desc, c);
  add_evaluation_options(desc, c, text);
  add_output_options(desc, c);
  if (!sft)
    desc.add_options()("describe", po::value(&c.describe)->default_value(false)->implicit_value(true),
                       "print what the job builds and holds as one JSON object (parameters, FLOPs per token, "
                       "activation bytes under each --recompute mode, every setting; train/describe.hpp), then exit");
  desc.add(probe::shared_options(text.shared));
  desc.add(variant_desc);

  po::variables_map vm;
  ConfigFileKeys from_file;
  if (!parse_options(argc, argv, desc, vm, &from_file)) return false;

  try {  // a value the --config file gave is refused naming the file as well as the key
    for (const auto& [flag, value] : axes) c.model.set_axis(flag, value);
    if (sft) take_model_from_checkpoint(c, vm);
    else if (!c.init_from.empty()) c.init_from = resolve_initial_weights(c.init_from, "--init-weights");
    check_train_config(c, text, world_size, sft);
  } catch (const Error& e) {
    throw Error(from_file.attribute(e.what()));
  }
  c.config_text = effective_config_text(vm, c.model, sft);
  c.command_line = command_line_of(argc, argv);
  return true;
}

DataConfig data_config(const TrainConfig& cfg, bool validation) {
  DataConfig d;
  d.shards = validation ? cfg.valid_data : cfg.train_data;
  d.context = cfg.model.context;
  d.seed = cfg.seed;
  d.document_rows = cfg.document_rows;
  d.shuffle = !validation;
  if (validation) return d;
  d.max_tokens = uint64_t(cfg.max_train_tokens);
  d.resample_positions = cfg.resample_positions;
  d.resample_vocab = uint32_t(cfg.model.vocab_size);
  d.fixed_token_position = cfg.fixed_token_position;
  d.fixed_token_id = int32_t(cfg.fixed_token_id);
  return d;
}

bool evaluation_due(const TrainConfig& cfg, int64_t n_done) {
  if (cfg.eval_coarse_every > 0 && n_done >= cfg.eval_coarse_from)
    return (n_done - cfg.eval_coarse_from) % cfg.eval_coarse_every == 0;
  return cfg.eval_every > 0 && n_done % cfg.eval_every == 0;
}

}  // namespace sinklab::train
