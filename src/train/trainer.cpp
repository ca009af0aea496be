#include "train/trainer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>

#include "backend/backend.hpp"
#include "backend/memory.hpp"
#include "backend/device_probe.hpp"
#include "backend/ledger.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "core/timer.hpp"
#include "io/h5.hpp"
#include "model/transformer.hpp"
#include "probe/model_probe.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"
#include "train/evaluation.hpp"
#include "train/grad_sync.hpp"
#include "train/monitor.hpp"
#include "train/optimizer.hpp"
#include "train/run_dir.hpp"
#include "train/schedule.hpp"
#include "train/signals.hpp"

namespace sinklab::train {

double gpu_dense_bf16_peak_flops(const std::string& gpu_name) {
  // Most specific first: "H100 PCIe" and "H100 NVL" also contain "H100".
  static const std::pair<const char*, double> table[] = {
      {"H100 PCIe", 756e12}, {"H100 NVL", 835e12}, {"H100", 989.4e12}, {"H200", 989.4e12}, {"GH200", 989.4e12},
      {"A100", 312e12},
  };
  for (const auto& [name, peak] : table)
    if (gpu_name.find(name) != std::string::npos) return peak;
  return 0.0;
}

namespace {

// What the run trains on: pre-training shards, or sinklab-sft's rows.
std::unique_ptr<TrainingData> make_training_data(const TrainConfig& cfg) {
  if (cfg.sft)
    return std::make_unique<SftSampler>(cfg.sft_data, cfg.model.context, cfg.seed, uint32_t(cfg.model.vocab_size));
  return std::make_unique<ChunkSampler>(data_config(cfg, /*validation=*/false));
}

// What one optimizer step did, for the log, results.h5 and the stability monitor (monitor.hpp).
struct StepRecord {
  double loss = 0, grad_norm = 0;  // mean loss over the global batch's counted targets; norm before clipping
  bool finite = true;              // loss and grad norm finite
  bool updated = true;             // false: non-finite, no update made
  std::vector<double> layer_grad_norm, update_ratio, max_abs_activation;  // [L]
};

// The monitor's max |activation| per layer: the residual stream leaving each layer, over every
// micro-batch of the step (a NaN stays), into device slots [L] (f64, zeroed by the step) that the step
// reads with its other statistics.
class ActivationMax : public LayerObserver {
 public:
  explicit ActivationMax(Tensor slots) : slots_(slots) {}
  void on_layer(const LayerTaps& taps) override {
    ops::reduce_into(slots_.slice(0, taps.layer, 1), taps.hidden_out, ops::Reduction::max_abs, /*accumulate=*/true);
  }

 private:
  Tensor slots_;
};

class Trainer {
 public:
  Trainer(const TrainConfig& cfg, parallel::World& world);
  int run();

 private:
  void resume_or_init();
  Fingerprint run_settings() const;
  Fingerprint fingerprint() const;
  void check_same_run(const CheckpointInfo& info, const std::map<std::string, std::string>& state) const;
  StepRecord train_step(int64_t step);
  // Reads f64 device values into host_ (one host synchronisation).
  const double* read_stats(Tensor device_values);
  void restart_monitor();
  void open_results(double flops_per_token, double peak_flops);
  void log_start(double flops_per_token, double peak_flops) const;
  void record_step(int64_t step, StepRecord& rec, int64_t tokens_per_step, double tokens_per_s, double mfu);
  void record_event(int64_t step, EventKind kind, double value, double mean, double std);
  void evaluate(int64_t n_done);
  void save_checkpoint_at(int64_t n_done);

  TrainConfig cfg_;  // sinklab-sft with --steps 0: steps resolved to one epoch
  parallel::World& world_;
  const int rank_, world_size_;
  Device device_;
  model::Transformer model_;
  ops::AttnKernelChoice attn_kernel_;  // --attn-kernel resolved for this model and device (logged, stored)
  model::ActivationBytes activation_bytes_;  // of one micro-batch, under --recompute (logged, stored)
  double measured_gemm_tflops_ = 0;          // CUDA: the device probe's bf16 GEMM figure (logged, stored)
  BatchLayout layout_;
  std::unique_ptr<TrainingData> train_data_;  // pre-training shards or fine-tuning rows
  Evaluator evaluator_;                       // validation loss and the sink probe (evaluation.hpp)
  std::unique_ptr<AdamW> optimizer_;
  ScheduleConfig schedule_;
  std::string ckpt_dir_, results_path_;
  std::optional<io::ResultsFile> results_;  // rank 0 only
  int64_t start_step_ = 0;
  std::string resumed_from_;  // the checkpoint --resume continued ("" when the run starts at step 0 without one)
  // Stability monitor.
  Buffer previous_params_buf_;                     // the parameters before the update (update ratio)
  int64_t nonfinite_steps_ = 0;                    // so far, over the whole run (kept in checkpoints)
  SpikeDetector loss_spikes_, grad_norm_spikes_;  // rank 0
  int64_t nan_grad_step_ = -1, loss_spike_step_ = -1;  // test hooks (monitor.hpp)
  std::unique_ptr<parallel::Communicator> comm_;
  std::unique_ptr<GradientSync> grad_sync_;  // gradients reduced in buckets during backward
  // [L + 1]: the flat ranges of layer l's parameters; [L]: the others' (gradient norms, update ratios).
  std::vector<std::vector<FlatRange>> norm_groups_;
  // The step's statistics on the device, read once after backward (step_stats_: the loss sum, max
  // |activation| per layer, the gradient norm's slots, square_sum_ranges(norm_groups_)) and once after the
  // update (ratio_stats_: sum of squares of layer l's update, then of its parameters): two host
  // synchronisations a step.
  Buffer stats_buffer_;
  Tensor step_stats_, ratio_stats_;
  ops::FlatRanges norm_ranges_, layer_ranges_;
  std::vector<double> host_;
  Buffer inputs_buf_, targets_buf_;
  Tensor inputs_, targets_;
  Buffer ids_stage_[2];  // batches are built on the host; a device model reads a copy (inputs, targets)
  double peak_flops_per_rank() const;
};

Trainer::Trainer(const TrainConfig& cfg, parallel::World& world)
    : cfg_(cfg),
      world_(world),
      rank_(world.rank()),
      world_size_(world.size()),
      device_(resolve_device(cfg.device, "--device", [&](int visible) { return world.local_gpu(visible); })),
      model_(cfg.model, device_),
      layout_(make_batch_layout(cfg.global_batch_tokens, cfg.model.context, cfg.micro_batch_rows, world.size())),
      train_data_(make_training_data(cfg)),
      evaluator_(cfg_, world),
      loss_spikes_(cfg.spike_sigma, cfg.spike_window),
      grad_norm_spikes_(cfg.spike_sigma, cfg.spike_window),
      nan_grad_step_(test_hook_step("SINKLAB_TEST_NAN_GRAD_STEP")),
      loss_spike_step_(test_hook_step("SINKLAB_TEST_LOSS_SPIKE_STEP")) {
  model_.set_attention_kernel(ops::parse_attn_kernel(cfg.attn_kernel), cfg.attn_deterministic);
  model_.set_fused_ops(cfg.fused_ops);
  attn_kernel_ = model_.attention_kernel();  // refuses a requested kernel that cannot run this attention
  model_.set_recompute(model::parse_recompute(cfg.recompute));
  model_.set_precision(model::parse_precision(cfg.precision));
  activation_bytes_ = model_.prepare_activations(layout_.rows, cfg.model.context);
  if (const uint32_t data_vocab = train_data_->data_vocab_size()) {  // shards say theirs; SFT rows are checked as read
    SL_CHECK(data_vocab <= uint32_t(cfg.model.vocab_size),
             "--vocab-size %d is smaller than the vocabulary of the training shards (%u)", cfg.model.vocab_size, data_vocab);
    SL_CHECK(evaluator_.valid_data().vocab_size() == data_vocab, "--valid-data has vocabulary %u but --train-data has %u",
             evaluator_.valid_data().vocab_size(), data_vocab);
  }
  SL_CHECK(evaluator_.valid_data().vocab_size() <= uint32_t(cfg.model.vocab_size),
           "--valid-data has vocabulary %u, more than the model's %d", evaluator_.valid_data().vocab_size(), cfg.model.vocab_size);
  if (cfg_.steps == 0) {  // one epoch (sinklab-sft's default)
    cfg_.steps = int64_t(train_data_->n_rows()) / layout_.global_rows();
    SL_CHECK(cfg_.steps >= 1, "%s holds %llu rows, fewer than one global batch of %lld rows", train_data_->flag(),
             (unsigned long long)train_data_->n_rows(), (long long)layout_.global_rows());
  }
  const int64_t needed_valid = std::max(cfg.eval_rows, cfg.probe_sequences);
  SL_CHECK(int64_t(evaluator_.valid_data().n_chunks()) >= needed_valid,
           "--valid-data holds %llu chunks of %d tokens, fewer than the %lld that --eval-rows/--probe-sequences need",
           (unsigned long long)evaluator_.valid_data().n_chunks(), cfg.model.context, (long long)needed_valid);

  std::vector<ParamRef> refs;
  for (const auto& spec : model_.specs())
    refs.push_back({spec.name, model_.param(spec.name), model_.grad(spec.name), spec.offset, spec.decay ? 1 : 0,
                    model::is_sink_parameter(spec.role) ? cfg.sink_lr_scale : 1.0});
  FlatRange owned = cfg.zero1 ? zero1_partition(model_.flat_params().numel(), world_size_, rank_) : FlatRange{0, -1};
  optimizer_ = std::make_unique<AdamW>(refs, AdamWConfig{cfg.beta1, cfg.beta2, cfg.adam_eps, cfg.weight_decay}, owned);
  schedule_ = ScheduleConfig{parse_lr_schedule(cfg.lr_schedule), cfg.lr, cfg.min_lr, cfg.warmup_steps, cfg_.steps};
  validate(schedule_);
  norm_groups_.resize(size_t(cfg.model.n_layers) + 1);
  for (const model::ParamSpec& spec : model_.specs()) {
    const int l = spec.layer;
    norm_groups_[l >= 0 ? size_t(l) : size_t(cfg.model.n_layers)].push_back({spec.offset, spec.offset + spec.numel});
  }
  comm_ = parallel::make_communicator(world, device_, backend_for(device_).compute_stream());
  const int64_t bucket_elements = int64_t(cfg.grad_bucket_mb * double(1 << 20) / sizeof(float));
  grad_sync_ = std::make_unique<GradientSync>(*comm_, model_.flat_grads(), model_.backward_spans(), bucket_elements,
                                              cfg.zero1 && world_size_ > 1);
  // The update writes the bf16 weights the next forward multiplies (--precision bf16), except where ZeRO-1's
  // all-gather brings other ranks' parameters in f32 (params_changed in train_step).
  optimizer_->use_flat_buffers(model_.flat_params(), model_.flat_grads(), model_.flat_params_lp());
  model_.manage_weights_lp(true);
  norm_ranges_ = grad_sync_->square_sum_ranges(norm_groups_);
  for (int l = 0; l < cfg.model.n_layers; ++l)
    for (const FlatRange& range : norm_groups_[size_t(l)]) {
      layer_ranges_.ranges.push_back(range);
      layer_ranges_.tags.push_back(l);
    }
  const int64_t L = cfg.model.n_layers, step_slots = 1 + L + (L + 1) * world_size_;
  stats_buffer_ = Buffer::for_tensor(DType::f64, {step_slots + 2 * L}, device_);
  step_stats_ = stats_buffer_.view(DType::f64, {step_slots + 2 * L}).slice(0, 0, step_slots);
  ratio_stats_ = stats_buffer_.view(DType::f64, {step_slots + 2 * L}).slice(0, step_slots, 2 * L);

  ckpt_dir_ = checkpoints_dir(cfg.out_dir);
  results_path_ = results_path(cfg.out_dir);
  const int64_t rows = cfg.micro_batch_rows, C = cfg.model.context;
  inputs_buf_ = Buffer::for_tensor(DType::i32, {rows, C});
  targets_buf_ = Buffer::for_tensor(DType::i32, {rows, C});
  inputs_ = inputs_buf_.view(DType::i32, {rows, C});
  targets_ = targets_buf_.view(DType::i32, {rows, C});
}

// MFU's denominator for one rank: --peak-tflops, else the GPU's known dense bf16 peak, else 0 (no MFU).
double Trainer::peak_flops_per_rank() const {
  if (cfg_.peak_tflops > 0) return cfg_.peak_tflops * 1e12;
  if (!device_.is_cpu()) return gpu_dense_bf16_peak_flops(backend_for(device_).device_name());
  return 0.0;
}

void Trainer::resume_or_init() {
  std::optional<std::string> latest = cfg_.resume ? latest_checkpoint(ckpt_dir_) : std::nullopt;
  if (!latest) {
    if (cfg_.resume) log::info0("no checkpoint in %s: starting from step 0", ckpt_dir_.c_str());
    if (cfg_.init_from.empty()) {
      model_.init_weights(cfg_.seed);
      return;
    }
    // Fine-tuning, and pre-training with --init-weights, start from a checkpoint's weights with a fresh
    // optimizer.
    std::vector<io::NamedTensor> weights;
    for (const auto& spec : model_.specs()) weights.push_back({spec.name, model_.param(spec.name)});
    load_initial_weights(cfg_.init_from, weights);
    model_.zero_grads();
    log::info0(cfg_.sft ? "fine-tuning %s (its weights; a fresh optimizer)"
                        : "initial weights from %s (--init-weights; a fresh optimizer)",
               cfg_.init_from.c_str());
    return;
  }
  CheckpointInfo info = open_checkpoint(*latest);
  SL_CHECK(info.step <= cfg_.steps,
           "--steps %lld is below the step of %s (%lld): --resume continues a run up to --steps; give --steps >= %lld",
           (long long)cfg_.steps, latest->c_str(), (long long)info.step, (long long)info.step);
  SL_CHECK(info.world == world_size_, "%s was written by %d ranks; resume it with the same number (got %d)",
           latest->c_str(), info.world, world_size_);
  const std::string state_path = rank_state_path(info, rank_);
  io::SafetensorsFile state(state_path);
  check_same_run(info, state.metadata());
  std::vector<io::NamedTensor> weights;
  for (const auto& spec : model_.specs()) weights.push_back({spec.name, model_.param(spec.name)});
  load_weights(info, weights);
  auto fp = state.metadata().find("data_fingerprint");
  SL_CHECK(fp != state.metadata().end() && fp->second == train_data_->fingerprint(),
           "%s: the checkpoint was trained on different data (%s) than %s now (%s)", state_path.c_str(),
           fp == state.metadata().end() ? "unknown" : fp->second.c_str(), train_data_->flag(),
           train_data_->fingerprint().c_str());
  optimizer_->load_state(state);
  start_step_ = info.step;
  resumed_from_ = *latest;
  auto nonfinite = state.metadata().find("nonfinite_steps");
  nonfinite_steps_ = nonfinite == state.metadata().end() ? 0 : std::stoll(nonfinite->second);
  // Skipped steps (--on-nonfinite skip) made no optimizer step.
  SL_CHECK(optimizer_->step_count() + nonfinite_steps_ == start_step_,
           "%s: optimizer step %lld + %lld skipped differs from checkpoint step %lld", state_path.c_str(),
           (long long)optimizer_->step_count(), (long long)nonfinite_steps_, (long long)start_step_);
  model_.zero_grads();
  log::info0("resumed from %s (step %lld)", latest->c_str(), (long long)start_step_);
}

// What a resumed job must share with the run it continues, as (flag, value): the model (stored as the
// checkpoint's config.json) and every other setting that changes the trajectory: the training data with
// its interventions, order and batch, the optimizer and its schedule, the numerics (stored in every
// rank's state file as "run:<flag>"). --steps is not one of them: a resume may extend a run. The data
// fingerprint covers the data too, but says less.
Fingerprint Trainer::run_settings() const {
  Fingerprint settings = train_data_->run_settings();
  if (!cfg_.init_from.empty()) settings.emplace_back(cfg_.sft ? "init-from" : "init-weights", cfg_.init_from);
  settings.emplace_back("valid-data", evaluator_.valid_data().content_text());
  settings.emplace_back("seed", std::to_string(cfg_.seed));
  settings.emplace_back("global-batch-tokens", std::to_string(cfg_.global_batch_tokens));
  const std::pair<const char*, double> numbers[] = {
      {"lr", cfg_.lr},       {"min-lr", cfg_.min_lr},     {"beta1", cfg_.beta1},         {"beta2", cfg_.beta2},
      {"adam-eps", cfg_.adam_eps}, {"weight-decay", cfg_.weight_decay}, {"grad-clip", cfg_.grad_clip},
      {"sink-lr-scale", cfg_.sink_lr_scale}};
  for (const auto& [flag, value] : numbers) settings.emplace_back(flag, number_text(value));
  settings.emplace_back("warmup-steps", std::to_string(cfg_.warmup_steps));
  settings.emplace_back("lr-schedule", cfg_.lr_schedule);
  settings.emplace_back("precision", cfg_.precision);
  return settings;
}

// The run's whole fingerprint: the model's settings, then run_settings(). Stored in results.h5 as
// "flag = value" lines (/runs/<run> attribute "fingerprint"), where --resume compares it with this job's.
Fingerprint Trainer::fingerprint() const {
  Fingerprint settings = cfg_.model.settings();
  for (auto& setting : run_settings()) settings.push_back(std::move(setting));
  return settings;
}

// Refuses, with one line naming the setting and both values, a checkpoint of another run: a resume
// into it would train a different model or data from the checkpoint's weights without a word.
void Trainer::check_same_run(const CheckpointInfo& info, const std::map<std::string, std::string>& state) const {
  const model::ModelConfig theirs =
      model::ModelConfig::from_hf_config_json(read_config_json(info), info.path + "/" + kCheckpointConfig);
  std::map<std::string, std::string> stored;
  for (const auto& [flag, value] : theirs.settings()) stored[flag] = value;
  for (const auto& [key, value] : state)  // older checkpoints lack some: the data fingerprint only
    if (key.starts_with("run:")) stored[key.substr(4)] = value;
  refuse_other_run(stored, fingerprint(), info.path + " was trained with");
  // The same numbers need the same BLAS kernels and threads (backend.hpp); another node kind is fine, but
  // the continuation then differs from an uninterrupted run in the last bits.
  auto blas = state.find("blas");
  if (rank_ == 0 && blas != state.end() && blas->second != cpu_blas_description())
    log::warn("%s was written with %s, this job runs %s: training continues correctly, but not bit for bit as an "
               "uninterrupted run would", info.path.c_str(), blas->second.c_str(), cpu_blas_description().c_str());
}

// ||x|| over the flat ranges of a buffer laid out as the model's (parameters, the saved previous parameters).
const double* Trainer::read_stats(Tensor device_values) {
  host_.resize(size_t(device_values.numel()));
  ops::copy(Tensor(host_.data(), DType::f64, {device_values.numel()}), device_values);
  return host_.data();
}

// One optimizer step: accumulate gradients over this rank's micro-batches, all-reduce, check, clip,
// update. The loss is the mean over the global batch's counted targets (trainer.hpp): the global count
// first (the data alone), then every micro-batch's gradient scaled by its inverse. The device works
// through the step without waiting for the host but twice: to read the loss and gradient norm (the update
// needs the clipping factor and whether they are finite) and the update ratios (the monitor's).
StepRecord Trainer::train_step(int64_t step) {
  ledger::Scope step_scope("step", step);
  const int L = cfg_.model.n_layers;
  StepRecord rec;
  double global_targets = 0.0;
  for (int64_t micro = 0; micro < layout_.accum; ++micro)
    global_targets += double(train_data_->count_targets(layout_, uint64_t(step), micro, rank_));
  if (world_size_ > 1) global_targets = world_.allreduce_sum(global_targets);
  const double grad_scale = global_targets > 0 ? 1.0 / global_targets : 0.0;
  model_.zero_grads();
  ops::fill(step_stats_, 0.0);
  ActivationMax activations(step_stats_.slice(0, 1, L));
  double sums[2] = {0.0, 0.0};  // loss sum, targets the model counted (a prefix-LM's prefix is not)
  for (int64_t micro = 0; micro < layout_.accum; ++micro) {
    ledger::Scope micro_scope("micro", micro);
    train_data_->fill_batch(layout_, uint64_t(step), micro, rank_, inputs_, targets_);
    sums[1] += double(model_.count_targets(targets_));
    // The last micro-batch's backward hands each finished part of the gradients to grad_sync_.
    const bool last = micro == layout_.accum - 1;
    model_.accumulate_forward_backward(staged_copy(ids_stage_[0], inputs_, device_),
                                       staged_copy(ids_stage_[1], targets_, device_), grad_scale,
                                       step_stats_.slice(0, 0, 1), &activations, last ? grad_sync_.get() : nullptr);
  }
  ledger::Scope update_scope("update");
  grad_sync_->finish();
  if (step == nan_grad_step_) ops::fill(model_.flat_grads().slice(0, 0, 1), std::numeric_limits<double>::quiet_NaN());
  // The norms from the reduced gradients' owned ranges (grad_sync.hpp): layer l's, then the others'.
  const int64_t norm_slots = step_stats_.numel() - 1 - L;
  ops::sum_squares_ranges(step_stats_.slice(0, 1 + L, norm_slots), model_.flat_grads(), norm_ranges_);
  const double* stats = read_stats(step_stats_);
  sums[0] = stats[0];
  if (world_size_ > 1) world_.allreduce_sum(sums, 2);
  rec.loss = sums[1] > 0 ? sums[0] / sums[1] : 0.0;  // no assistant token in the whole batch: loss 0, no gradient
  rec.max_abs_activation.assign(stats + 1, stats + 1 + L);  // a NaN on any rank stays NaN (World::allreduce_max)
  if (world_size_ > 1) world_.allreduce_max(rec.max_abs_activation.data(), rec.max_abs_activation.size());
  const std::vector<double> squares =
      grad_sync_->combine_square_sums(std::vector<double>(stats + 1 + L, stats + 1 + L + norm_slots), size_t(L) + 1);
  double total = 0.0;
  for (int l = 0; l <= L; ++l) total += squares[size_t(l)];
  rec.grad_norm = std::sqrt(total);
  for (int l = 0; l < L; ++l) rec.layer_grad_norm.push_back(std::sqrt(squares[size_t(l)]));
  rec.finite = std::isfinite(rec.loss) && std::isfinite(rec.grad_norm);
  rec.update_ratio.assign(size_t(L), 0.0);
  if (!rec.finite) {  // no update: --on-nonfinite skip goes on with the next step, halt stops (run())
    rec.updated = false;
    return rec;
  }
  const double coef = clip_coefficient(rec.grad_norm, cfg_.grad_clip);
  Tensor params = model_.flat_params();
  if (!previous_params_buf_.data()) previous_params_buf_ = Buffer::for_tensor(DType::f32, {params.numel()}, device_);
  Tensor previous = previous_params_buf_.view(DType::f32, {params.numel()});
  ops::copy(previous, params);
  optimizer_->step(learning_rate(schedule_, step), coef < 1.0 ? coef : 1.0);  // the gradients scaled as it reads them
  if (grad_sync_->zero1()) grad_sync_->allgather_params(params);
  model_.params_changed(/*lp_written=*/!grad_sync_->zero1());
  ops::accumulate(previous, params, -1.0);  // previous - updated = -(the update)
  ops::sum_squares_ranges(ratio_stats_.slice(0, 0, L), previous, layer_ranges_);
  ops::sum_squares_ranges(ratio_stats_.slice(0, L, L), params, layer_ranges_);
  const double* ratios = read_stats(ratio_stats_);
  for (int l = 0; l < L; ++l) {
    const double weight = std::sqrt(ratios[L + l]);
    rec.update_ratio[size_t(l)] = weight > 0 ? std::sqrt(ratios[l]) / weight : 0.0;
  }
  return rec;
}

// One evaluation after n_done steps: logged, and written by rank 0.
void Trainer::evaluate(int64_t n_done) {
  const Evaluation e = evaluator_.run(model_);
  evaluator_.log(n_done, e);
  if (results_) evaluator_.write(*results_, "/runs/" + cfg_.run_name + "/eval", n_done, e);
}

void Trainer::save_checkpoint_at(int64_t n_done) {
  // Results first: after a kill, results.h5 holds at least every row up to the newest checkpoint, and
  // a resume truncates whatever lies beyond it.
  if (results_) results_->commit();
  std::string tmp;
  if (rank_ == 0) tmp = begin_checkpoint(ckpt_dir_, n_done);
  world_.barrier();
  if (rank_ != 0) tmp = ckpt_dir_ + "/" + checkpoint_dir_name(n_done) + ".tmp";
  RankState state;
  std::vector<Buffer> host;
  state.tensors = optimizer_->state_tensors(&host);
  state.metadata = optimizer_->state_metadata();
  state.metadata["data_fingerprint"] = train_data_->fingerprint();
  state.metadata["nonfinite_steps"] = std::to_string(nonfinite_steps_);
  for (const auto& [flag, value] : run_settings()) state.metadata["run:" + flag] = value;
  state.metadata["blas"] = cpu_blas_description();
  write_rank_state(tmp, rank_, state);
  if (rank_ == 0) {
    std::vector<io::NamedTensor> weights;
    for (const auto& spec : model_.specs()) weights.push_back({spec.name, model_.param(spec.name)});
    write_model(tmp, weights, cfg_.model.hf_config_json(), {{"sinklab_step", std::to_string(n_done)}});
  }
  world_.barrier();
  if (rank_ == 0) finish_checkpoint(ckpt_dir_, n_done, world_size_, int(cfg_.keep_checkpoints));
  world_.barrier();
}

// Rank 0, at start and on --resume: drops the monitor rows and events logged after the checkpoint
// (the train and eval groups are truncated by run()) and refills the spike detectors' windows from the
// train rows kept, so that a resumed run flags exactly what an uninterrupted one does.
void Trainer::restart_monitor() {
  const std::string run = "/runs/" + cfg_.run_name;
  if (results_->exists(run + "/monitor")) results_->truncate_rows(run + "/monitor", start_step_);
  if (results_->exists(run + "/events/step")) {
    std::vector<int64_t> steps = results_->read_column_int(run + "/events/step");
    results_->truncate_rows(run + "/events",
                            std::count_if(steps.begin(), steps.end(), [&](int64_t s) { return s < start_step_; }));
  }
  if (start_step_ > 0 && results_->exists(run + "/train/loss")) {
    const std::vector<double> loss = results_->read_column(run + "/train/loss");
    const std::vector<double> grad_norm = results_->read_column(run + "/train/grad_norm");
    for (size_t i = 0; i < loss.size() && int64_t(i) < start_step_; ++i) {
      loss_spikes_.observe(loss[i], nullptr, nullptr);
      grad_norm_spikes_.observe(grad_norm[i], nullptr, nullptr);
    }
  }
}

void Trainer::record_event(int64_t step, EventKind kind, double value, double mean, double std) {
  static const char* names[] = {"non-finite step", "loss spike", "grad-norm spike"};
  if (kind == EventKind::nonfinite)
    log::warn("event at step %lld: %s (%s; %lld so far)", (long long)step + 1, names[int(kind)],
              cfg_.on_nonfinite == "skip" ? "skipped: no update" : "halting", (long long)nonfinite_steps_);
  else
    log::warn("event at step %lld: %s, %.4g > mean %.4g + %g x std %.3g of the last %lld steps", (long long)step + 1,
              names[int(kind)], value, mean, cfg_.spike_sigma, std, (long long)cfg_.spike_window);
  const std::string g = "/runs/" + cfg_.run_name + "/events";
  results_->append_row(g, {io::Cell("step", step), io::Cell("kind", int(kind)), io::Cell("value", value),
                           io::Cell("window_mean", mean), io::Cell("window_std", std)});
  results_->set_attr(g, "kinds", kEventKinds);
}

// The step's rows: train (as always), monitor, and events (monitor.hpp). Counts a non-finite step.
void Trainer::record_step(int64_t step, StepRecord& rec, int64_t tokens_per_step, double tokens_per_s, double mfu) {
  if (!rec.finite) ++nonfinite_steps_;
  if (results_ && cfg_.record_batches) {  // the rows of the step's global batch, in sample order
    std::vector<int32_t> rows(size_t(layout_.global_rows()));
    for (size_t r = 0; r < rows.size(); ++r) {
      const uint64_t row = train_data_->row_of(uint64_t(step) * rows.size() + r);
      SL_CHECK(row < (uint64_t(1) << 31), "--record-batches: row %llu does not fit the int32 record", (unsigned long long)row);
      rows[r] = int32_t(row);
    }
    results_->append_slab("/runs/" + cfg_.run_name + "/batches/rows", {layout_.global_rows()}, rows.data());
  }
  if (step == loss_spike_step_) rec.loss *= 100.0;  // test hook: what the detector must flag
  if (!results_) return;
  const int64_t L = cfg_.model.n_layers;
  const std::string run = "/runs/" + cfg_.run_name;
  results_->append_row(run + "/train", {io::Cell("step", step), io::Cell("tokens", (step + 1) * tokens_per_step),
                                        io::Cell("loss", rec.loss), io::Cell("lr", learning_rate(schedule_, step)),
                                        io::Cell("grad_norm", rec.grad_norm), io::Cell("tokens_per_s", tokens_per_s),
                                        io::Cell("mfu", mfu)});
  results_->append_row(run + "/monitor", {io::Cell("step", step), io::Cell("skipped", rec.updated ? 0 : 1),
                                          io::Cell("nonfinite_steps", nonfinite_steps_)});
  results_->append_slab(run + "/monitor/layer_grad_norm", {L}, rec.layer_grad_norm.data());
  results_->append_slab(run + "/monitor/update_ratio", {L}, rec.update_ratio.data());
  results_->append_slab(run + "/monitor/max_abs_activation", {L}, rec.max_abs_activation.data());
  const double nan = std::numeric_limits<double>::quiet_NaN();
  if (!rec.finite) record_event(step, EventKind::nonfinite, std::isfinite(rec.loss) ? rec.grad_norm : rec.loss, nan, nan);
  double mean = 0, std = 0;
  if (loss_spikes_.observe(rec.loss, &mean, &std)) record_event(step, EventKind::loss_spike, rec.loss, mean, std);
  if (grad_norm_spikes_.observe(rec.grad_norm, &mean, &std))
    record_event(step, EventKind::grad_norm_spike, rec.grad_norm, mean, std);
}

// Rank 0: creates results.h5 (or reopens it on --resume, dropping whatever was logged after the
// checkpoint) and writes the run's attributes.
void Trainer::open_results(double flops_per_token, double peak_flops) {
  const std::string run = "/runs/" + cfg_.run_name, train_group = run + "/train", eval_group = run + "/eval";
  io::RootInfo info{SINKLAB_VERSION, "", io::now_utc_iso(), cfg_.command_line, cfg_.config_text, cpu_blas_summary()};
  std::error_code ec;
  const bool exists = std::filesystem::exists(results_path_, ec);
  SL_CHECK(!cfg_.resume || exists || resumed_from_.empty(),
           "--resume: %s continues from %s, but %s is missing: the steps it logged are gone; start the run again (in "
           "a new --out-dir, or here with --overwrite), or give a new run these weights with --init-weights=%s",
           cfg_.out_dir.c_str(), resumed_from_.c_str(), results_path_.c_str(), resumed_from_.c_str());
  if (cfg_.resume && exists)
    check_results_continue_run(io::ResultsFile::open_read(results_path_), cfg_.run_name, fingerprint(), start_step_,
                               resumed_from_);
  results_ = cfg_.resume && exists ? io::ResultsFile::open(results_path_) : io::ResultsFile::create(results_path_, info);
  // One train row (and batches row) per completed step, eval rows for step counts <= the checkpoint's.
  if (results_->exists(train_group)) results_->truncate_rows(train_group, start_step_);
  if (results_->exists(eval_group + "/step")) {
    // A run that starts over (--resume without a checkpoint: killed before its first one) evaluates step 0
    // again, so it keeps no row of the attempt before; a resumed one keeps the rows up to its checkpoint's step.
    std::vector<int64_t> steps = results_->read_column_int(eval_group + "/step");
    const bool starts_over = resumed_from_.empty();
    const int64_t keep =
        starts_over ? 0 : std::count_if(steps.begin(), steps.end(), [&](int64_t s) { return s <= start_step_; });
    results_->truncate_rows(eval_group, keep);
  }
  restart_monitor();
  if (results_->exists(run + "/batches/rows")) results_->truncate_rows(run + "/batches", start_step_);
  results_->create_group(run);
  results_->set_attr(run, "config", cfg_.config_text);
  results_->set_attr(run, "fingerprint", fingerprint_text(fingerprint()));
  // sft: eval row step 0 probes these weights, the sink before fine-tuning (Table 1 right); pre-training:
  // the run did not draw its initial weights (--init-weights).
  if (!cfg_.init_from.empty()) results_->set_attr(run, "init_from", cfg_.init_from);
  results_->set_attr(run, "cpu_blas", cpu_blas_description());  // whose last bits these are
  results_->set_attr(run, "attn_kernel", ops::attn_kernel_name(attn_kernel_.kernel));
  results_->set_attr(run, "attn_kernel_reason", attn_kernel_.reason);
  results_->set_attr(run, "fused_ops", model_.fusions().residual_norm ? "residual_norm" : "none");
  results_->set_attr(run, "fused_ops_reason", model_.fusions().reason);
  // Activation memory of one micro-batch under --recompute (Transformer::prepare_activations).
  results_->set_attr(run, "recompute", std::string(model::recompute_name(model_.recompute())));
  results_->set_attr(run, "precision", std::string(model::precision_name(model_.precision())));
  results_->set_attr(run, "activation_bytes_per_layer", activation_bytes_.kept_per_layer);
  results_->set_attr(run, "activation_bytes_recomputed", activation_bytes_.recomputed);
  results_->set_attr(run, "activation_bytes_total", activation_bytes_.total(cfg_.model.n_layers));
  // Parameter counts (Fig. 4 left): all, and without the word embedding and unembedding (the paper's
  // "60M parameters except for word embeddings and unembeddings", Sec. 4).
  results_->set_attr(run, "n_params", model_.num_parameters());
  results_->set_attr(run, "n_params_non_embedding", model_.num_parameters_non_embedding());
  // MFU = flops_per_token x tokens/s / (peak_flops_per_rank x ranks); the train table's mfu is NaN
  // where no peak is known (CPU without --peak-tflops).
  results_->set_attr(run, "flops_per_token", flops_per_token);
  results_->set_attr(run, "peak_flops_per_rank", peak_flops);
  if (device_.is_cuda()) {  // the device probe beside the MFU: what the GPU is and what its GEMMs reach here
    results_->set_attr(run, "device_facts", device_facts_text(cuda_device_facts(device_.index)));
    results_->set_attr(run, "measured_bf16_gemm_tflops", measured_gemm_tflops_);
  }
  // How the gradients were reduced (grad_sync.hpp).
  results_->set_attr(run, "grad_buckets", int64_t(grad_sync_->buckets().size()));
  results_->set_attr(run, "grad_reduction", std::string(grad_sync_->zero1() ? "reduce-scatter (ZeRO-1)" : "all-reduce"));
  evaluator_.describe(*results_, eval_group);
}

// The run's header lines: size, data, batch layout, gradient reduction, MFU's peak, kernels.
void Trainer::log_start(double flops_per_token, double peak_flops) const {
  log::info0("%s: %lld parameters, %d rank(s), %lld tokens/step (%lld rows x %d, %lld micro-step(s) "
             "of %lld rows per rank), %llu training tokens, %lld steps",
             cfg_.sft ? "sinklab-sft" : "sinklab-pretrain", (long long)model_.num_parameters(), world_size_,
             (long long)(layout_.global_rows() * cfg_.model.context), (long long)layout_.global_rows(),
             cfg_.model.context, (long long)layout_.accum, (long long)layout_.rows,
             (unsigned long long)train_data_->n_tokens(), (long long)cfg_.steps);
  if (world_size_ > 1)
    log::info0("gradients: %s in %zu bucket(s) of >= %.3g MiB, started during backward", grad_sync_->zero1() ? "reduce-scatter (ZeRO-1)" : "all-reduce",
               grad_sync_->buckets().size(), cfg_.grad_bucket_mb);
  if (peak_flops > 0)
    log::info0("MFU: %.4g GFLOP per token against %.4g TFLOP/s per rank", flops_per_token / 1e9, peak_flops / 1e12);
  if (measured_gemm_tflops_ > 0)
    log::info0("device: %s, bf16 GEMM 4096^3 measured at %.1f TFLOP/s", backend_for(device_).device_name().c_str(),
               measured_gemm_tflops_);
  log::info0("attention kernel: %s (%s)", ops::attn_kernel_name(attn_kernel_.kernel), attn_kernel_.reason.c_str());
  log::info0("fused ops: %s (%s)", model_.fusions().residual_norm ? "residual add + RMSNorm" : "none",
             model_.fusions().reason.c_str());
  log::info0("precision: %s%s", model::precision_name(model_.precision()),
             model_.precision() == model::Precision::bf16
                 ? " (bf16 activations and activation gradients, f32 accumulation, f32 weights, gradients and optimizer state)"
                 : "");
  const double mib = 1024.0 * 1024.0;
  log::info0("activations of a micro-batch (recompute %s): %.4g MiB kept per layer x %d + %.4g MiB recomputed + %.4g "
             "MiB head and backward workspace = %.4g MiB",
             model::recompute_name(model_.recompute()), activation_bytes_.kept_per_layer / mib, cfg_.model.n_layers,
             activation_bytes_.recomputed / mib, activation_bytes_.rest / mib,
             activation_bytes_.total(cfg_.model.n_layers) / mib);
  log::info0("CPU BLAS: %s", cpu_blas_summary().c_str());
}

int Trainer::run() {
  install_stop_handlers();
  resume_or_init();

  const double flops_per_token = model_.flops_per_token(cfg_.model.context), peak_flops = peak_flops_per_rank();
  // On a GPU: the bf16 GEMM TFLOP/s this device reaches through the op API (sinklab-gpuinfo's figure,
  // at 4096^3 here to keep start-up short), what MFU can be read against. SINKLAB_GEMM_PROBE_N sets the size
  // (0: none; the CUDA emulation's checks, whose stand-in GEMM would take hours at 4096^3).
  const char* probe_n = std::getenv("SINKLAB_GEMM_PROBE_N");
  const int64_t gemm_n = probe_n ? std::atoll(probe_n) : 4096;
  if (device_.is_cuda() && gemm_n > 0) measured_gemm_tflops_ = measure_gemm_tflops(device_, DType::bf16, gemm_n, 3);
  if (rank_ == 0) {
    open_results(flops_per_token, peak_flops);
    remove_done_marker(cfg_.out_dir);  // a stale one would tell slurm/common.sh that this job finished
  }
  log_start(flops_per_token, peak_flops);
  const int64_t tokens_per_step = layout_.global_rows() * cfg_.model.context;
  if (start_step_ == 0 && cfg_.checkpoint_at_start) save_checkpoint_at(0);
  // Fine-tuning always probes the base model first: the "before" of the before/after sink.
  if (start_step_ == 0 && (cfg_.eval_every > 0 || cfg_.eval_coarse_every > 0 || cfg_.sft)) evaluate(0);

  Timer run_timer;
  double train_seconds = 0.0;
  int64_t steps_timed = 0;
  bool stopped = false;
  for (int64_t step = start_step_; step < cfg_.steps; ++step) {
    Timer step_timer;
    StepRecord rec = train_step(step);
    const double seconds = step_timer.seconds();
    train_seconds += seconds;
    ++steps_timed;
    const double lr = learning_rate(schedule_, step);
    const double tokens_per_s = double(tokens_per_step) / seconds;
    const double mfu = peak_flops > 0 ? flops_per_token * tokens_per_s / (peak_flops * world_size_)
                                      : std::numeric_limits<double>::quiet_NaN();
    const int64_t n_done = step + 1;
    record_step(step, rec, tokens_per_step, tokens_per_s, mfu);
    if (step == start_step_ || n_done % cfg_.log_every == 0 || n_done == cfg_.steps) {
      const double eta = train_seconds / double(steps_timed) * double(cfg_.steps - n_done);
      const std::string mfu_text = peak_flops > 0 ? strfmt(" | MFU %.1f%%", 100.0 * mfu) : "";
      log::info0("step %lld/%lld | loss %.4f | lr %.2e | grad norm %.3f | %.0f tok/s%s | elapsed %s | ETA %s",
                 (long long)n_done, (long long)cfg_.steps, rec.loss, lr, rec.grad_norm, tokens_per_s, mfu_text.c_str(),
                 hms(run_timer.seconds()).c_str(), hms(eta).c_str());
    }
    if (!rec.finite && cfg_.on_nonfinite == "halt") {
      if (results_) results_->commit();  // the monitor rows and the event of this step; checkpoints untouched
      SL_FAIL("step %lld: loss %g, grad norm %g are not finite: halting (--on-nonfinite halt; the checkpoints in %s "
              "are intact; resume with --on-nonfinite skip, or start a new run with a lower --lr)", (long long)n_done,
              rec.loss, rec.grad_norm, ckpt_dir_.c_str());
    }

    double stop_flag = stop_requested() ? 1.0 : 0.0;  // every rank must agree to stop at the same step
    if (world_size_ > 1) world_.allreduce_sum(&stop_flag, 1);
    const bool last = n_done == cfg_.steps;
    if (evaluation_due(cfg_, n_done) || last) evaluate(n_done);
    if ((cfg_.checkpoint_every > 0 && n_done % cfg_.checkpoint_every == 0) || last || stop_flag > 0)
      save_checkpoint_at(n_done);
    if (stop_flag > 0 && !last) {
      log::info0("stop requested: checkpointed at step %lld, exiting for a later --resume", (long long)n_done);
      stopped = true;
      break;
    }
  }
  if (results_) results_->commit();
  if (rank_ == 0 && !stopped) {
    write_done_marker(cfg_.out_dir, cfg_.steps, cfg_.steps);
    log::info0("done: %lld steps in %s; results in %s", (long long)cfg_.steps, hms(run_timer.seconds()).c_str(),
               results_path_.c_str());
  }
  world_.barrier();
  return 0;
}

}  // namespace

int run_training(const TrainConfig& cfg, parallel::World& world) {
  // Rank 0 claims --out-dir for the job's life before anything there is read (run_dir.hpp).
  std::optional<RunDirLock> lock;
  if (world.rank() == 0) {
    lock.emplace(cfg.out_dir);
    remove_leftovers(cfg.out_dir);
    if (!cfg.resume) claim_for_fresh_run(cfg.out_dir, cfg.overwrite);
  }
  world.barrier();
  Trainer trainer(cfg, world);
  return trainer.run();
}

}  // namespace sinklab::train
