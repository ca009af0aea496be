// TrainConfig: every setting of sinklab-pretrain and sinklab-sft, read from `--config jobs/.../x.ini`
// and flags (flags override the file; both use the same names). Unknown or malformed settings end the
// program with one line naming the flag or file. sinklab-sft takes the model from its --init-from
// checkpoint (a model flag that disagrees with it is refused, naming the flag) and its training data
// from --sft-data (data_prep sft); it has no data interventions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "probe/shared_options.hpp"
#include "train/data.hpp"

namespace sinklab::train {

struct TrainConfig {
  model::ModelConfig model;

  // Data: shards written by data_prep (comma-separated lists allowed).
  std::vector<std::string> train_data, valid_data;
  int64_t max_train_tokens = 0;  // 0 = all; else only the first N tokens (the paper's data-budget axis)
  // Data-distribution interventions on every training chunk (Sec. 5, Table 10 right), 1-based positions:
  std::vector<int64_t> resample_positions;  // tokens replaced by Uniform(vocab) draws (Philox, per sample)
  int64_t fixed_token_position = 0;         // > 0: this position always holds fixed_token_id
  int64_t fixed_token_id = 0;
  // Rows are documents (data.hpp, "Document rows"): fixed-length BOS-started sequences such as data_prep bbm's.
  bool document_rows = false;
  // data_prep bbm's bbm.json (the Bigram-Backcopy task): evaluations split the validation loss into copy
  // and bigram positions and the first token's attention by query kind (train/evaluation.hpp).
  std::string bbm_meta;

  // Fine-tuning (sinklab-sft).
  bool sft = false;
  // sinklab-sft's --init-from, sinklab-pretrain's --init-weights (optional): the step_<N> directory (or,
  // for --init-weights, the .safetensors file) whose weights start the run (resolved)
  std::string init_from;
  std::string sft_data;   // data_prep sft output: tokens + assistant loss mask, packed rows of C

  // Stability monitor (train/monitor.hpp), written every step.
  std::string on_nonfinite = "halt";  // skip | halt: a step whose loss or gradient norm is not finite
  double spike_sigma = 6.0;           // a loss or grad norm above mean + k sigma of the window is an event
  int64_t spike_window = 50;          // steps in the running window

  // Optimisation.
  int64_t steps = 0;  // sinklab-sft: 0 = one epoch of --sft-data
  int64_t global_batch_tokens = 0;  // tokens per optimizer step, over all ranks and micro-steps
  int64_t micro_batch_rows = 0;     // rows per forward/backward on one rank
  double lr = 4e-4, min_lr = 0.0;
  int64_t warmup_steps = 0;
  std::string lr_schedule = "constant";  // constant | cosine
  double beta1 = 0.9, beta2 = 0.95, adam_eps = 1e-8, weight_decay = 0.1, grad_clip = 1.0;
  double sink_lr_scale = 1.0;  // the learned sink tensors' lr is --lr times this (model::is_sink_parameter)
  bool zero1 = false;
  double grad_bucket_mb = 25.0;  // data-parallel gradient buckets (train/grad_sync.hpp); 0 = one per layer
  double peak_tflops = 0.0;      // MFU's denominator per rank; 0 = the GPU's known dense bf16 peak, none on CPU
  uint64_t seed = 1234;

  // Evaluation and the sink probe (paper Sec. 3.2 / 4).
  int64_t eval_every = 0;       // 0 = only at the end
  int64_t eval_coarse_from = 0, eval_coarse_every = 0;  // --eval-every-after STEP:N: every N steps from STEP on
  int64_t eval_rows = 16;       // validation rows of C tokens per evaluation
  int64_t probe_sequences = 100;
  int64_t probe_length = 64;
  int probe_max_k = 4;  // alpha_k and Sink_k^eps stored for k = 1..K (a moved sink, Table 10 right)
  std::vector<double> sink_eps = {0.2, 0.3, 0.4};

  // Output.
  std::string out_dir = "results/run";
  std::string run_name = "run";
  int64_t log_every = 10;
  int64_t checkpoint_every = 0;  // 0 = only at the end
  int64_t keep_checkpoints = 2;
  bool checkpoint_at_start = false;  // also a checkpoint of the initial weights (step 0): a twin's starting point
  bool record_batches = false;       // /runs/<run>/batches/rows [step, global rows]: the rows each step read
  bool resume = false;
  bool overwrite = false;  // a fresh run may delete another run's results.h5 and checkpoints in --out-dir (run_dir.hpp)
  DeviceKind device = DeviceKind::cpu;  // --device cpu | cuda
  std::string attn_kernel = probe::kDefaultAttnKernel;  // auto | cudnn | flash | gemm | reference (probe/shared_options.hpp)
  bool attn_deterministic = true;     // cuDNN's deterministic backward (the other kernels always are)
  bool fused_ops = true;              // model::StepFusions: off runs the op-by-op reference path
  std::string recompute = "none";     // none | attention | block (model/transformer.hpp, model::Recompute)
  std::string precision = "auto";     // auto | fp32 | bf16 (model::Precision); check_train_config resolves auto:
                                      // bf16 on cuda, fp32 on cpu
  bool dry_run = false;  // validate the configuration, print it, do nothing else
  bool describe = false;  // sinklab-pretrain: print describe_json (train/describe.hpp), do nothing else

  std::string config_text;   // the effective configuration as ini text (stored in results)
  std::string command_line;
};

// The data loader's settings of a run: the training stream (shuffled, within --max-train-tokens, with the
// data interventions of Sec. 5) or the validation rows (--valid-data in order, as they are).
DataConfig data_config(const TrainConfig& cfg, bool validation);

// Whether the evaluation schedule (--eval-every, --eval-every-after) evaluates after n_done steps (the
// last step always is, by the trainer).
bool evaluation_due(const TrainConfig& cfg, int64_t n_done);

// Parses argv (and the --config file) of sinklab-pretrain, or of sinklab-sft when sft is true. Returns
// false when --help was printed.
bool parse_train_config(int argc, char** argv, TrainConfig& out, int world_size, bool sft = false);

}  // namespace sinklab::train
