// Measuring one survey item (survey_plan.hpp): load the model (kept while the same rank measures more
// items of it), build the inputs, run the forward passes through a SurveyProbe, and return the results
// as an io::ResultSet for the /models/<model>/<label>/<domain> group (names and attributes below).
//
//   alpha[La,H,K] sink[E] sink_eps[E] sink_k[K,E] hnorm_first[L] hnorm_rest[L] massive_ratio[L]
//   knorm_first[La] knorm_rest[La] vnorm_first[La] vnorm_rest[La] last_to_first[La,H]
//   attention_layers[La] (int32) — alpha and the k/v arrays index these layers
//   post-norm models: hnorm_first_pre_norm[L] hnorm_rest_pre_norm[L] massive_ratio_pre_norm[L]
//   qk_pairs[P,2] (int32) qk_cos[P,T,T] qk_normprod[P,T,T]; attention_pairs[P,2] attention_maps[P,T,T]
//       (when pairs were asked for and exist in the model; not for long inputs)
//   intervention items: sink_t[E] = Sink_t^eps at the intervention's position (K is raised to t)
//   ablation items (survey_plan.hpp) also: attrs ablation (the tag), ablation_kind, window and sink_tokens, or
//       layer (and top_dims); attention ablations hold only tokens, the loss and the attributes
//   hellaswag items (multiple_choice.hpp) instead: loglik[C] (f64) n_cont_tokens[C] choice_chars[C]
//       example_offsets[N+1] label[N] pred[N] pred_norm[N]; attrs acc, acc_norm, n_examples, inputs_file, model_type,
//       model_dir, weights, input, domain
//   tokens[n,T] (int32) — the token ids measured (natural rows as read, random/repeated as generated)
//   attrs: n_seq (sequences measured), n_seq_requested, T, bos (the prefix token id, -1: none),
//          input, domain, model_type, model_dir, seed, inputs_file | vocabulary, intervention, t,
//          skipped_pairs (pairs the model does not have),
//          loss (f64) — mean next-token cross-entropy in nats over the n (T-1) predicted positions
//              (next_token_loss_sum); HF models only (sinklab's own checkpoints give no logits), and only
//              when one sequence's f32 logits [T,V] fit in --max-logits-memory (by default not the T = 4096 long inputs),
//          source, source_sha256, quantization — copied from the model directory's sinklab_source.json
//              when it has one (data_prep gguf-import writes it: GGUF file name, sha256, tensor types)
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "backend/memory.hpp"
#include "hf/hf_model.hpp"
#include "io/result_set.hpp"
#include "probe/survey_metrics.hpp"
#include "probe/survey_plan.hpp"

namespace sinklab::probe {


struct SurveyParams {
  int64_t n_seq = 100, seq_len = 64;       // natural / random / repeat
  std::vector<int64_t> seq_lens;           // more T of those (items with SurveyItem::seq_len)
  int64_t long_n_seq = 16, long_len = 4096;  // long
  int max_k = 8;
  std::vector<double> eps = default_sink_eps();
  int64_t batch = 16;
  uint64_t seed = 1234;
  int64_t max_memory = 0;  // bytes, 0 = unbounded (hf::LoadOptions); -1 = auto (MemoryBudget below)
  std::vector<HeadPair> qk_maps, attention_maps;
  std::string survey_inputs_dir;
  std::string hellaswag_dir;  // data_prep hellaswag files
  int64_t hellaswag_n = 0;    // examples per model, 0 = all
  int64_t max_logits_bytes = int64_t(256) << 20;  // the most one forward pass's logits may take (the loss)
  ops::AttnKernel attention_kernel = ops::AttnKernel::reference;  // --attn-kernel (hf::LoadOptions)
};

// What a rank may hold: --max-memory as given (weights streamed under it), or by default ("auto") the
// node's memory (node_memory(): cgroup limit or MemTotal) shared equally among the ranks on the node,
// under which a model whose f32 weights fit (with a quarter to spare) stays resident and a larger one
// is streamed. A model whose streamed footprint (resident weights + one layer + the staged block) or
// whose batch of activations exceeds the budget fails its items with that reason, before anything is
// converted; the other items go on.
// On a GPU (--device cuda, one GPU per rank) the budget is the GPU's: "auto" is nine tenths of the memory
// free on it at start (the rest for the CUDA context, cuBLASLt's and cuDNN's workspaces), and a model is
// streamed to the GPU layer by layer when its weights do not fit that.
struct MemoryBudget {
  int64_t bytes = 0;    // 0 = unbounded
  bool auto_ = false;   // from the node (or the GPU): models that fit stay resident
  std::string origin;   // "auto: 23.5 GiB (MemTotal) / 2 ranks on this node", for messages
  // The budget on `device` (where the models will run): the node's memory, or the GPU's.
  static MemoryBudget resolve(int64_t max_memory_flag, int local_ranks, Device device = Device::cpu());
};

// The model a rank holds: loading another releases it first. A model that failed to load keeps its
// error, so its remaining items fail at once with the same line.
class ModelCache {
 public:
  // Models are loaded onto `device` (sinklab-survey's --device) within `budget`.
  ModelCache(MemoryBudget budget, Device device, ops::AttnKernel attention_kernel = ops::AttnKernel::reference)
      : budget_(std::move(budget)), device_(device), attention_kernel_(attention_kernel) {}
  hf::HfModel& get(const SurveyModel& model);
  // Releases the model (after a forward pass that did not finish: the next item loads it afresh).
  void drop() {
    model_.reset();
    name_.clear();
    error_.clear();
  }

 private:
  MemoryBudget budget_;
  Device device_;
  ops::AttnKernel attention_kernel_;
  std::string name_, error_;
  std::unique_ptr<hf::HfModel> model_;
};

// The token ids of an item's inputs.
struct InputTokens {
  Buffer buffer;
  Tensor ids;          // i32 [n, T]
  int64_t bos = -1;    // the prefix token of natural inputs (-1: none)
  std::string source;  // inputs file or vocabulary description
};

// Rows [0, min(n_requested, rows)) and columns [0, T) of /<domain>/tokens of a survey inputs file (data_prep
// survey-inputs), every id checked against the model's vocabulary; bos from the root attribute prefix_id.
// Throws naming the file and the dataset.
InputTokens read_natural_tokens(const std::string& path, const std::string& domain, int64_t n_requested, int64_t T,
                                int64_t vocab_size);

// The files that define a model directory's tokenizer and their fingerprint, as data_prep's
// tokenization.tokenizer_fingerprint computes it: the first form present of tokenizer.json,
// tokenizer.model (sentencepiece), vocab.json + merges.txt (byte-level BPE); the sha256 of its one file,
// or the sha256 of its files' sha256sum lines ("<sha256>  <name>\n" each, in that order).
struct TokenizerFingerprint {
  std::string files;   // "tokenizer.json", "tokenizer.model" or "vocab.json + merges.txt"
  std::string sha256;  // 64 hex digits
};
// Throws "<dir>: no tokenizer.json, tokenizer.model or vocab.json + merges.txt ..." when none is there.
TokenizerFingerprint tokenizer_fingerprint(const std::string& model_dir);

// Survey inputs files (data_prep survey-inputs) by the fingerprint of the tokenizer they were made with
// (their tokenizer_sha256 attribute), and by their T; the directory is indexed once. With kind
// "hellaswag", data_prep hellaswag files (root attribute kind = "hellaswag") by fingerprint alone; `dir`
// may then also name one such file, used for every model.
class InputsFinder {
 public:
  explicit InputsFinder(std::string dir, std::string kind = "survey-inputs") : dir_(std::move(dir)), kind_(std::move(kind)) {}
  // The file for `model` with at least T tokens per row: the one the config names, else among the
  // files of the model's tokenizer the one with the smallest T >= T (ties: by name). Throws saying
  // what is missing.
  std::string find(const SurveyModel& model, int64_t T);

 private:
  struct Entry {
    std::string path, sha;
    int64_t T = 0;
  };
  std::string dir_, kind_;
  bool indexed_ = false;
  std::vector<Entry> entries_;
};

// Measures one item. `progress` is called after every layer of every forward pass (rank 0 serves the
// work queue from it; throwing from it abandons the item). Errors of the item (files, model, inputs)
// throw sinklab::Error.
// `hellaswag` finds the hellaswag input's files (InputsFinder with kind "hellaswag").
io::ResultSet measure_item(const SurveyItem& item, const SurveyModel& model, const SurveyParams& params,
                           ModelCache& models, InputsFinder& inputs, InputsFinder& hellaswag,
                           const std::function<void()>& progress);

}  // namespace sinklab::probe
