#include "train/train_config.hpp"

#include <boost/program_options.hpp>

#include "core/error.hpp"
#include "core/options.hpp"
#include "core/text.hpp"
#include "probe/sink_metrics.hpp"
#include "train/data.hpp"

namespace sinklab::train {

namespace po = boost::program_options;

bool parse_train_config(int argc, char** argv, TrainConfig& c, int world_size) {
  std::string config_file, train_data, valid_data, sink_eps = "0.2,0.3,0.4", resample_positions;
  model::ModelConfig& m = c.model;
  po::options_description desc("sinklab-pretrain options (also valid as `name = value` lines in --config)");
  // The model's variant axes (model/config.hpp), one option each, defaults = the paper's default model.
  const model::ModelConfig default_model;
  std::vector<std::pair<std::string, std::string>> axes = default_model.axes();
  po::options_description variant_desc("model variant axes (paper Secs. 6-7, App. C; see jobs/pretrain/INDEX.md)");
  for (auto& [flag, value] : axes)
    variant_desc.add_options()(flag.c_str(), po::value(&value)->default_value(value),
                                   model::ModelConfig::axis_help(flag));
  desc.add_options()
      ("help", "print this help")
      ("config", po::value(&config_file), "ini file with any of these options; flags override it")
      // model
      ("vocab-size", po::value(&m.vocab_size)->required(), "vocabulary size (>= the shards' vocab)")
      ("d-model", po::value(&m.d_model)->required(), "hidden dimension d")
      ("n-layers", po::value(&m.n_layers)->required(), "transformer blocks L")
      ("n-heads", po::value(&m.n_heads)->required(), "attention heads H")
      ("n-kv-heads", po::value(&m.n_kv_heads)->default_value(0), "key/value heads (0 = n-heads)")
      ("ffn-hidden", po::value(&m.ffn_hidden)->required(), "SwiGLU hidden width")
      ("context", po::value(&m.context)->required(), "context length C (tokens per training row)")
      ("rope-theta", po::value(&m.rope_theta)->default_value(10000.0), "rotary base")
      ("norm-eps", po::value(&m.norm_eps)->default_value(1e-5), "RMSNorm epsilon")
      // data
      ("train-data", po::value(&train_data)->required(), "training shard(s), comma-separated")
      ("valid-data", po::value(&valid_data)->required(), "validation shard(s), comma-separated")
      ("max-train-tokens", po::value(&c.max_train_tokens)->default_value(0), "use only the first N training tokens (0 = all)")
      ("resample-positions", po::value(&resample_positions)->default_value(""),
       "1-based positions of every training chunk whose token is redrawn uniformly from [0, --vocab-size) for each "
       "sample, e.g. 1 or 1,2 (Sec. 5; validation and probe data are not changed)")
      ("fixed-token-position", po::value(&c.fixed_token_position)->default_value(0),
       "1-based position of every training chunk that always holds --fixed-token-id (0 = off; Table 10 right)")
      ("fixed-token-id", po::value(&c.fixed_token_id)->default_value(0), "the token of --fixed-token-position")
      // optimisation
      ("steps", po::value(&c.steps)->required(), "optimizer steps")
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
      ("zero1", po::value(&c.zero1)->default_value(false), "shard the optimizer state across ranks (ZeRO-1)")
      ("seed", po::value(&c.seed)->default_value(1234), "seed of initialisation and data order")
      // evaluation / probe
      ("eval-every", po::value(&c.eval_every)->default_value(0), "steps between evaluations (0 = end only)")
      ("eval-rows", po::value(&c.eval_rows)->default_value(16), "validation rows of C tokens per evaluation")
      ("probe-sequences", po::value(&c.probe_sequences)->default_value(100), "held-out sequences for the sink probe")
      ("probe-length", po::value(&c.probe_length)->default_value(64), "tokens per probe sequence (T)")
      ("probe-max-k", po::value(&c.probe_max_k)->default_value(4),
       "positions k = 1..K whose alpha_k and Sink_k^eps are stored (a sink moved off the first token)")
      ("sink-eps", po::value(&sink_eps)->default_value("0.2,0.3,0.4"), "thresholds of Sink_1^eps, comma-separated")
      // output
      ("out-dir", po::value(&c.out_dir)->default_value("results/run"), "checkpoints and results.h5 go here")
      ("run-name", po::value(&c.run_name)->default_value("run"), "name of the run in the HDF5 file")
      ("log-every", po::value(&c.log_every)->default_value(10), "steps between progress lines")
      ("checkpoint-every", po::value(&c.checkpoint_every)->default_value(0), "steps between checkpoints (0 = end only)")
      ("keep-checkpoints", po::value(&c.keep_checkpoints)->default_value(2), "checkpoints kept on disk")
      ("resume", po::value(&c.resume)->default_value(false)->implicit_value(true), "continue from the newest checkpoint in --out-dir")
      ("device", po::value(&c.device)->default_value("cpu"), "cpu | cuda")
      ("dry-run", po::value(&c.dry_run)->default_value(false)->implicit_value(true),
       "check the configuration and print it (every option with its value), then exit");
  desc.add(variant_desc);

  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm)) return false;

  for (const auto& [flag, value] : axes) m.set_axis(flag, value);
  for (double p : parse_number_list(resample_positions, "resample-positions")) {
    SL_CHECK(p == double(int64_t(p)) && p >= 1 && p <= m.context,
             "--resample-positions: %g is not a position in [1, --context]", p);
    SL_CHECK(int64_t(p) != c.fixed_token_position, "--fixed-token-position %g is also in --resample-positions", p);
    c.resample_positions.push_back(int64_t(p));
  }
  SL_CHECK(c.fixed_token_position >= 0 && c.fixed_token_position <= m.context,
           "--fixed-token-position must lie in [0, --context]");
  SL_CHECK(c.fixed_token_id >= 0 && c.fixed_token_id < m.vocab_size, "--fixed-token-id must lie in [0, --vocab-size)");
  c.train_data = split_commas(train_data);
  c.valid_data = split_commas(valid_data);
  c.sink_eps = probe::parse_sink_eps(sink_eps);
  m.validate();
  SL_CHECK(!c.train_data.empty(), "--train-data names no shard");
  SL_CHECK(!c.valid_data.empty(), "--valid-data names no shard");
  SL_CHECK(c.steps > 0, "--steps must be positive");
  SL_CHECK(c.lr_schedule == "constant" || c.lr_schedule == "cosine", "--lr-schedule must be constant or cosine, not '%s'",
           c.lr_schedule.c_str());
  make_batch_layout(c.global_batch_tokens, m.context, c.micro_batch_rows, world_size);  // throws naming the flags
  SL_CHECK(c.lr > 0 && c.min_lr >= 0 && c.min_lr <= c.lr, "--lr must be positive and --min-lr in [0, lr]");
  SL_CHECK(c.beta1 >= 0 && c.beta1 < 1 && c.beta2 >= 0 && c.beta2 < 1, "--beta1/--beta2 must lie in [0, 1)");
  SL_CHECK(c.weight_decay >= 0, "--weight-decay must be >= 0");
  SL_CHECK(c.probe_length >= 1 && c.probe_length <= m.context, "--probe-length must lie in [1, --context]");
  SL_CHECK(c.probe_max_k >= 1 && c.probe_max_k <= c.probe_length, "--probe-max-k must lie in [1, --probe-length]");
  SL_CHECK(c.probe_sequences >= 0, "--probe-sequences must be >= 0");
  SL_CHECK(c.device == "cpu" || c.device == "cuda", "--device must be cpu or cuda, not '%s'", c.device.c_str());

  // The effective configuration, every option with its value, as ini text (sorted by name).
  c.config_text = options_as_ini(vm, {"config", "help", "dry-run"});
  c.command_line = command_line_of(argc, argv);
  return true;
}

}  // namespace sinklab::train
