// The evaluations of a training run (every --eval-every steps, at step 0 and at the end): the
// validation loss and the sink probe (paper Sec. 3.2 / 4) on held-out data, both split across ranks;
// for runs with a data intervention, the probe again with the intervention applied; for runs on the
// Bigram-Backcopy task (--bbm-meta), its split by position kind. Written to results.h5 under
// /runs/<run>/eval (docs/DESIGN.md, "HDF5 results").
//
// Bigram-Backcopy (data_prep bbm, Guo et al. 2024). With --document-rows each validation row is one
// sequence BOS x_1 .. x_C; without, rows start anywhere in the stream of sequences BOS x_1 .. x_256 <d>.
// Position i >= 1 of a row counts by its input and target:
//   copy positions    the input is a trigger token: the target repeats the input before it;
//   bigram positions  any other input whose target is drawn from the bigram table;
//   neither           position 0 (BOS predicts x_1, a floor of its own, data_prep/README.md; without
//                     document rows its copy source may lie before the row), an input BOS or <d>, a target <d>.
// copy_loss and bigram_loss are the mean validation losses over those positions. The probe's query
// groups are 0 = non-trigger queries (the BOS query included, as in Guo's measurement) and 1 = trigger
// queries: first_attention[l, h, 0] is Guo's BOS attention (probe/model_probe.hpp). Without document
// rows, BOS and <d> inside a row are the probe's marked keys (marked_attention: where the sink went).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "parallel/mpi.hpp"
#include "io/h5.hpp"
#include "model/transformer.hpp"
#include "probe/model_probe.hpp"
#include "train/data.hpp"
#include "train/train_config.hpp"

namespace sinklab::train {

// What --bbm-meta says about the data: its trigger tokens and BOS. Throws naming --bbm-meta when the
// file is not data_prep bbm's or does not describe the validation shards (their CRC-32s).
struct BbmTask {
  std::vector<int32_t> trigger_ids;
  int32_t bos_id = -1, delimiter_id = -1;
  bool is_trigger(int32_t token) const;
  bool is_boundary(int32_t token) const { return token == bos_id || token == delimiter_id; }
};
BbmTask read_bbm_meta(const std::string& path, const ChunkSampler& valid_data);

struct Evaluation {
  double valid_loss = 0;
  probe::ProbeResult probe;
  // Runs with a data intervention (--fixed-token-position, --resample-positions): the same probe on the
  // same sequences with the run's own intervention applied, where the moved sink shows (Table 10 right).
  std::optional<probe::ProbeResult> probe_intervened;
  // Bigram-Backcopy runs: the mean validation loss over copy and over bigram positions.
  double copy_loss = 0, bigram_loss = 0;
  // The learned sink tensors at this step, [L,H] each (a bias shared by a layer's heads repeated for each);
  // empty when the model has none: the sink logits S_h, ||k*|| and ||v*||.
  std::vector<double> sink_logit, k_bias_norm, v_bias_norm;
};

class Evaluator {
 public:
  // Opens the validation data (--valid-data, cut as the training rows are) and --bbm-meta.
  Evaluator(const TrainConfig& cfg, const parallel::World& world);
  const ChunkSampler& valid_data() const { return valid_data_; }

  // One evaluation of `model` (on its device: the host-built batches are staged there).
  Evaluation run(model::Transformer& model);
  // The attributes of the eval group, once per run (rank 0).
  void describe(io::ResultsFile& results, const std::string& group) const;
  // The log line and the eval group's rows for an evaluation after n_done steps (rows: rank 0 only).
  void log(int64_t n_done, const Evaluation& e) const;
  void write(io::ResultsFile& results, const std::string& group, int64_t n_done, const Evaluation& e) const;

 private:
  std::vector<int8_t> query_groups(const Tensor& probe_inputs) const;
  std::vector<uint8_t> marked_keys(const Tensor& probe_inputs) const;
  const TrainConfig& cfg_;
  const parallel::World& world_;
  DataConfig train_data_config_;  // the interventions the intervened probe applies
  ChunkSampler valid_data_;
  std::optional<BbmTask> bbm_;
  Buffer inputs_buf_, targets_buf_, losses_buf_, probe_buf_;
  Buffer ids_stage_[2];  // a device model's copies of the inputs and targets (backend/memory.hpp staged_copy)
};

}  // namespace sinklab::train
