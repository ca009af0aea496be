// What a survey measures (sinklab-survey, paper Sec. 3 and App. B): the models, and the items — one
// (model, input, domain, intervention) each — that the work queue hands out and the results file keys
// by id. Planning reads no model weights, so every rank builds the same list in the same order.
//
//   input     natural   data_prep survey inputs of one Pile domain (the model's tokenizer, its default
//                       special tokens), T = --seq-len
//             random    T tokens uniform over the tokenizer's vocabulary, special tokens excluded
//             repeat    one such token repeated T times (paper Table 1 left)
//             long      natural text of T = --long-input-len tokens (the long-input appendix)
//             hellaswag multiple-choice log-likelihood scoring of a HellaSwag-format file made into tokens
//                       by data_prep hellaswag (accuracy beside the sink: paper Fig. 10)
//   T         natural/random/repeat are measured at T = --seq-len, and again at each T of --seq-lens
//             (Sink vs T: paper Fig. 3); such an item's label is "<input>@T<T>" ("natural@T256")
//   domain    a Pile domain key for natural/long, "-" for random/repeat/hellaswag
//   intervention (learned-position models, paper Table 7): p_1 := p_t (replace) or p_1 <-> p_t (swap),
//             t the paper's 1-based position
//   ablation  what the sink does (issue #19; hf::AttentionAblation, hf::HiddenAblation), on the ablation
//             inputs at --seq-len and every --seq-lens length; beside the plain items at the same T (full
//             attention):
//               window:W           each query sees its W most recent tokens only
//               window_sinks:W:s   the same plus the first s tokens (StreamingLLM's cache of s + W)
//               mask_first:l       the first token's attention logits masked from layer l (0-based) on
//               massive_zero:l:n   the n largest features of h_1 at block l's output set to 0
//               massive_mean:l:n   ... set to their mean over the other tokens
//             attention ablations measure the next-token loss only; the massive ones the sink metric too
//
// Results: /models/<model>/<input label>/<domain>, the label being the input, "<input>@T<T>" at another
// length, "<input>+<tag>" with an intervention ("repeat+swap_5"), "<input>[@T<T>]+<tag>" with an ablation
// ("natural@T1024+window_256_sinks_4"); bookkeeping under /items/<id>, id = "<model>:<label>:<domain>".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>
#include "probe/survey_metrics.hpp"

namespace sinklab::probe {

struct Intervention {
  enum class Kind { replace, swap };
  Kind kind = Kind::replace;
  int64_t t = 0;  // 1-based position (>= 2)
  std::string tag() const;  // "replace_5", "swap_10"
};

// "replace:5,swap:10" ("" or "none": no intervention). Errors name `where` (a flag or a config line).
std::vector<Intervention> parse_interventions(const std::string& text, const std::string& where);

struct Ablation {
  enum class Kind { window, window_sinks, mask_first, massive_zero, massive_mean };
  Kind kind = Kind::window;
  int64_t window = 0, sink_tokens = 0;  // window, window_sinks
  int layer = 0;                        // mask_first (from this layer on), massive_* (at this block's output)
  int top_dims = 0;                     // massive_*
  bool attention() const { return kind == Kind::window || kind == Kind::window_sinks || kind == Kind::mask_first; }
  std::string tag() const;  // "window_256", "window_256_sinks_4", "mask_first_from_2", "massive_zero_2_top4"
};
// "window:256,window_sinks:256:4,mask_first:2,massive_mean:2:4" ("" or "none": none). Errors name `where`.
std::vector<Ablation> parse_ablations(const std::string& text, const std::string& where);

struct SurveyModel {
  std::string name;    // the results' /models/<name>
  std::string dir;     // model directory (config.json, model.safetensors[.index.json], tokenizer.json)
  std::string inputs;  // survey inputs file set in the config ("" = found by tokenizer sha256)
  // Per-model interventions from the config; nullopt: the --interventions list, for models with
  // learned positions.
  std::optional<std::vector<Intervention>> interventions;
  // Per-model layer:head pairs of the QK and attention maps (e.g. Jamba's attention layers, Figs. 25-26);
  // nullopt: --qk-maps / --attention-maps.
  std::optional<std::vector<HeadPair>> qk_maps, attention_maps;
};

// A catalogue line (`model = NAME DIR [inputs=FILE] [interventions=LIST|none] [qk-maps=L:H,...]
// [attention-maps=L:H,...]` in the config): DIR relative to model_root unless absolute. Names are
// path-safe (no '/', ':', spaces).
SurveyModel parse_model_line(const std::string& line, const std::string& model_root);

// The models a --models list selects: "all" = the whole catalogue, else catalogue names or model
// directories (absolute, relative to the working directory, or else to model_root; named by their
// last component). A name twice, or one that is neither a catalogue name nor an existing directory, is an
// error naming --models (the latter listing the catalogue's names).
std::vector<SurveyModel> select_models(const std::vector<SurveyModel>& catalogue, const std::string& models,
                                       const std::string& model_root);

// True when <dir>/config.json names a learned-position family (model_type gpt2 or opt); false when it
// names another or cannot be read (the item itself reports unreadable models).
bool has_learned_positions(const std::string& dir);

// A model's position limit as <dir>/config.json states it (max_position_embeddings, GPT-2's n_positions).
struct PositionLimit {
  int64_t positions = 0;  // 0: the config states none or cannot be read (the item itself reports that)
  std::string key;        // the config key it comes from
  // No position exists beyond it: learned position embeddings (GPT-2, OPT) or a sinklab checkpoint's
  // fixed context. Rotary and position-free models run any length (beyond it: past their training).
  bool hard = false;
};
PositionLimit position_limit(const std::string& dir);

struct SurveyItem {
  int model = 0;       // index into the selected models
  std::string input;   // natural | random | repeat | long
  std::string domain;  // Pile domain key, or "-"
  std::optional<Intervention> intervention;
  int64_t seq_len = 0;  // T of a --seq-lens item; 0: --seq-len (or the long inputs' length)
  std::optional<Ablation> ablation{};

  std::string label() const;  // input, input@T<seq_len>, input+tag or input[@T<seq_len>]+ablation tag
  std::string id(const std::vector<SurveyModel>& models) const;
  std::string group(const std::vector<SurveyModel>& models) const;  // "/models/<m>/<label>/<domain>"
};

struct PlanOptions {
  std::vector<std::string> inputs;               // modes, in order
  std::vector<std::string> domains;              // for natural
  std::vector<std::string> long_domains;         // for long
  std::vector<Intervention> interventions;       // the global list
  std::vector<std::string> intervention_inputs;  // the inputs interventions are crossed with
  std::vector<int64_t> seq_lens;                 // more lengths of the natural/random/repeat inputs
  // The natural input's domains at those lengths (empty: `domains`): natural text of T = 1024 tokens exists
  // in fewer domains than of T = 64 (the mini corpus: a few).
  std::vector<std::string> seq_lens_domains;
  int64_t seq_len = 0;                           // --seq-len (a --seq-lens entry equal to it is skipped)
  std::vector<Ablation> ablations;
  std::vector<std::string> ablation_inputs;      // the inputs ablations are measured on (natural, long)
};

// Per model (in order): each input of `inputs` over its domains, then the natural/random/repeat ones
// again at each length of seq_lens, then each intervention over the intervention inputs and their domains,
// then each ablation over the ablation inputs, their lengths and domains. Unknown inputs, empty domain lists an input needs and
// duplicate ids throw naming the flag.
std::vector<SurveyItem> plan_items(const std::vector<SurveyModel>& models, const PlanOptions& options);

// T of an item: its --seq-lens length, --long-input-len for long inputs, else --seq-len; 0 for hellaswag
// (each example has its own length, checked as it is scored).
int64_t item_length(const SurveyItem& item, int64_t seq_len, int64_t long_len);

// Every item's T against its model's position limit, before any item runs: beyond a hard limit throws one
// line naming the flag that sets T, the model and the limit; beyond a soft one it is a warning line (one per
// model and T) for the caller to print.
std::vector<std::string> check_position_limits(const std::vector<SurveyModel>& models,
                                               const std::vector<SurveyItem>& items, int64_t seq_len,
                                               int64_t long_len);

}  // namespace sinklab::probe
