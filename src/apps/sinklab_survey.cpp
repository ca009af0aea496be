// sinklab-survey: the attention-sink survey of pretrained models (paper Sec. 3, App. B; the 32 models of
// Table 8) over natural, random and repeated inputs, with the position interventions of Table 7.
// Items (model, input, domain, intervention; probe/survey_plan.hpp) go through a dynamic MPI work
// queue (parallel/work_queue.hpp); rank 0 writes every result into one HDF5 file (docs/DESIGN.md, "HDF5 results"):
//   /models/<model>/<input>/<domain>/...   the measurements (probe/survey_run.hpp)
//   /items/<id>                            attrs status (ok|failed), error, rank, seconds, model, input, domain
// The file is committed atomically (io/h5.hpp) at most every --commit-every seconds and at the end, so a
// kill loses at most that much; --resume skips the items recorded ok. A failing item (missing files,
// unsupported model, bad inputs) is recorded with its error and the survey goes on; the exit status is
// 1, with a summary, when any item failed. SIGTERM/SIGUSR1 abandon the items in flight, commit and exit
// 0 (run again with --resume). "<output>.done" is written once every item has been attempted.
//
//   mpirun -np 4 sinklab-survey --config jobs/survey/open_models.ini --model-root /models
//       --survey-inputs-dir data/survey_inputs --output results/survey.h5 --resume
#include <algorithm>
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "backend/backend.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/options.hpp"
#include "core/text.hpp"
#include "core/timer.hpp"
#include "parallel/mpi.hpp"
#include "parallel/work_queue.hpp"
#include "io/h5.hpp"
#include "io/result_set.hpp"
#include "probe/shared_options.hpp"
#include "probe/survey_plan.hpp"
#include "probe/survey_run.hpp"
#include "probe/survey_writer.hpp"
#include "train/signals.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace sinklab;

namespace {

struct SurveyOptions {
  std::string config_text, command_line;
  std::string model_root, models, inputs, survey_inputs_dir, domains, long_domains, seq_lens_domains, interventions,
      intervention_inputs, max_memory, qk_maps, attention_maps, seq_lens, ablations, ablation_inputs,
      max_logits_memory, output;
  probe::SharedOptions shared;  // --config, --device, --attn-kernel, --sink-eps
  std::vector<std::string> model_lines;
  probe::SurveyParams params;
  double commit_every = 60.0;
  bool resume = false, dry_run = false;
};

// "0", "123456", "512M", "16G", "1T" (binary units) -> bytes.
int64_t parse_bytes(const std::string& text, const char* flag = "--max-memory") {
  size_t end = 0;
  double v = 0;
  try {
    v = std::stod(text, &end);
  } catch (const std::exception&) {
    end = 0;
  }
  const std::string unit = text.substr(end);
  double scale = 0;
  if (unit.empty()) scale = 1;
  else if (unit == "K") scale = 1024.0;
  else if (unit == "M") scale = 1024.0 * 1024;
  else if (unit == "G") scale = 1024.0 * 1024 * 1024;
  else if (unit == "T") scale = 1024.0 * 1024 * 1024 * 1024;
  SL_CHECK(end > 0 && scale > 0 && v >= 0 && v * scale < 0x1p62, "%s: '%s' is not a size (bytes, or a number with K, "
           "M, G, T)", flag, text.c_str());
  return int64_t(v * scale);
}

bool parse(int argc, char** argv, SurveyOptions& o) {
  probe::SurveyParams& p = o.params;
  po::options_description desc("sinklab-survey options (also valid as `name = value` lines in --config)");
  desc.add_options()
      ("model", po::value(&o.model_lines)->composing(),
       "a catalogue entry, repeatable: NAME DIR [inputs=FILE] [interventions=LIST|none] (DIR under --model-root)")
      ("model-root", po::value(&o.model_root)->default_value(""), "directory the catalogue's model directories are under")
      ("models", po::value(&o.models)->default_value("all"), "catalogue names or model directories, comma-separated (all = the catalogue)")
      ("inputs", po::value(&o.inputs)->default_value("natural,random,repeat"),
       "natural | random | repeat | long | hellaswag, comma-separated")
      ("survey-inputs-dir", po::value(&o.survey_inputs_dir)->default_value(""),
       "data_prep survey-inputs files (one per tokenizer; matched by the fingerprint of its files unless inputs= names one)")
      ("domains", po::value(&o.domains)->default_value(""), "Pile domain keys of the natural inputs, comma-separated")
      ("n-seq", po::value(&p.n_seq)->default_value(100), "sequences per item")
      ("seq-len", po::value(&p.seq_len)->default_value(64), "tokens per sequence (T)")
      ("seq-lens", po::value(&o.seq_lens)->default_value(""),
       "more T at which the natural/random/repeat inputs are measured, comma-separated (Sink vs T, Fig. 3; "
       "items labelled <input>@T<T>, without QK/attention maps)")
      ("seq-lens-domains", po::value(&o.seq_lens_domains)->default_value(""),
       "the natural input's domains at the --seq-lens lengths (default: --domains; long texts exist in fewer)")
      ("max-k", po::value(&p.max_k)->default_value(8), "positions k = 1..K whose alpha_k and Sink_k are stored")
      ("batch", po::value(&p.batch)->default_value(16), "sequences of --seq-len tokens per forward pass")
      ("max-memory", po::value(&o.max_memory)->default_value("auto"),
       "memory per rank: auto (the node's cgroup limit or MemTotal over its ranks; with --device cuda 9/10 of the "
       "GPU's free memory; models that fit stay resident, larger ones are streamed), 0 (unbounded), or a size "
       "(e.g. 16G: layer streaming under it; the GPU's memory with --device cuda)")
      ("interventions", po::value(&o.interventions)->default_value(""),
       "replace:t / swap:t of the first position embedding (Table 7), for learned-position models without their own list")
      ("intervention-inputs", po::value(&o.intervention_inputs)->default_value("repeat"), "inputs the interventions are measured on")
      ("ablations", po::value(&o.ablations)->default_value(""),
       "what the sink does, comma-separated: window:W, window_sinks:W:s (StreamingLLM), mask_first:l, massive_zero:l:n, "
       "massive_mean:l:n; on the ablation inputs at --seq-len and every --seq-lens length")
      ("ablation-inputs", po::value(&o.ablation_inputs)->default_value("natural"), "inputs the ablations are measured on (natural, long)")
      ("max-logits-memory", po::value(&o.max_logits_memory)->default_value("256M"),
       "the most one forward pass's logits may take per rank (the next-token loss; fewer sequences per pass above it)")
      ("qk-maps", po::value(&o.qk_maps)->default_value(""), "layer:head pairs (0-based, negative layer from the end) for QK cosine/norm maps")
      ("attention-maps", po::value(&o.attention_maps)->default_value(""), "layer:head pairs for mean attention maps")
      ("long-input-len", po::value(&p.long_len)->default_value(4096), "T of the long inputs")
      ("long-n-seq", po::value(&p.long_n_seq)->default_value(16), "sequences per long-input item")
      ("long-domains", po::value(&o.long_domains)->default_value("pile_cc"), "domains of the long inputs")
      ("hellaswag-dir", po::value(&p.hellaswag_dir)->default_value(""),
       "data_prep hellaswag files (one per tokenizer, matched by its fingerprint) for the hellaswag input")
      ("hellaswag-n", po::value(&p.hellaswag_n)->default_value(0), "examples scored per model (0 = all of the file)")
      ("seed", po::value(&p.seed)->default_value(1234), "seed of the random and repeated inputs")
      ("output", po::value(&o.output)->default_value("results/survey.h5"), "HDF5 results file")
      ("commit-every", po::value(&o.commit_every)->default_value(60.0), "seconds between commits of the results file (0 = after every item)")
      ("resume", po::value(&o.resume)->default_value(false)->implicit_value(true), "continue --output, skipping the items recorded ok")
      ("dry-run", po::value(&o.dry_run)->default_value(false)->implicit_value(true), "print the configuration and the items, then exit");
  desc.add(probe::shared_options(o.shared));
  po::variables_map vm;
  if (!parse_options(argc, argv, desc, vm)) return false;
  o.shared.device_kind();  // a bad value fails here, before any work
  p.attention_kernel = o.shared.attention_kernel();
  p.eps = o.shared.thresholds();
  p.max_memory = o.max_memory == "auto" ? -1 : parse_bytes(o.max_memory);
  p.max_logits_bytes = parse_bytes(o.max_logits_memory, "--max-logits-memory");
  SL_CHECK(p.max_logits_bytes > 0, "--max-logits-memory must be positive");
  p.qk_maps = probe::parse_head_pairs(o.qk_maps, "qk-maps");
  p.attention_maps = probe::parse_head_pairs(o.attention_maps, "attention-maps");
  p.survey_inputs_dir = o.survey_inputs_dir;
  for (double T : parse_number_list(o.seq_lens, "--seq-lens")) {
    SL_CHECK(T >= 2 && T == double(int64_t(T)), "--seq-lens: %g is not a whole number of tokens >= 2", T);
    p.seq_lens.push_back(int64_t(T));
  }
  SL_CHECK(p.hellaswag_n >= 0, "--hellaswag-n must be >= 0");
  SL_CHECK(p.n_seq >= 1 && p.long_n_seq >= 1, "--n-seq and --long-n-seq must be positive");
  SL_CHECK(p.seq_len >= 2 && p.long_len >= 2, "--seq-len and --long-input-len must be at least 2");
  SL_CHECK(p.max_k >= 1 && p.max_k <= p.seq_len, "--max-k must lie in [1, --seq-len]");
  SL_CHECK(p.batch >= 1, "--batch must be positive");
  SL_CHECK(o.commit_every >= 0, "--commit-every must be >= 0");
  SL_CHECK(!o.output.empty(), "--output names no file");
  o.config_text = options_as_ini(vm, {"config", "help", "dry-run", "resume"});
  o.command_line = command_line_of(argc, argv);
  return true;
}

// Relative cost of an item for the scheduler and the ETA: weights on disk x tokens.
double item_cost(const probe::SurveyItem& item, const std::vector<probe::SurveyModel>& models,
                 const probe::SurveyParams& p, std::map<int, double>& weights) {
  auto it = weights.find(item.model);
  if (it == weights.end()) {
    double bytes = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(models[size_t(item.model)].dir, ec))
      if (e.path().extension() == ".safetensors") bytes += double(e.file_size(ec));
    it = weights.emplace(item.model, std::max(bytes, 1e6)).first;
  }
  double tokens = item.input == "long" ? double(p.long_n_seq * p.long_len)
                                       : double(p.n_seq * (item.seq_len > 0 ? item.seq_len : p.seq_len));
  // A hellaswag item before its file is read: HellaSwag's validation split, 4 choices of ~64 tokens.
  constexpr double kHellaswagExamples = 10042, kHellaswagTokensPerExample = 4 * 64;
  if (item.input == "hellaswag")
    tokens = kHellaswagTokensPerExample * (p.hellaswag_n > 0 ? double(p.hellaswag_n) : kHellaswagExamples);
  return it->second * tokens;
}

// Thrown from the progress hook to abandon the item in flight when the survey is stopping.
struct Stopped {};
// Errors of rank 0's bookkeeping inside the progress hook: fatal, never an item's failure.
struct Fatal : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// What the flags ask to measure, for probe::plan_items.
probe::PlanOptions plan_options(const SurveyOptions& o) {
  probe::PlanOptions plan;
  plan.inputs = split_commas(o.inputs);
  plan.domains = split_commas(o.domains);
  plan.long_domains = split_commas(o.long_domains);
  plan.seq_lens_domains = split_commas(o.seq_lens_domains);
  plan.interventions = probe::parse_interventions(o.interventions, "--interventions");
  plan.intervention_inputs = split_commas(o.intervention_inputs);
  plan.seq_lens = o.params.seq_lens;
  plan.ablations = probe::parse_ablations(o.ablations, "--ablations");
  plan.ablation_inputs = split_commas(o.ablation_inputs);
  plan.seq_len = o.params.seq_len;
  return plan;
}

int run(const SurveyOptions& o, const parallel::World& world) {
  log::info0("CPU BLAS: %s", cpu_blas_summary().c_str());
  std::vector<probe::SurveyModel> catalogue;
  for (const std::string& line : o.model_lines) catalogue.push_back(probe::parse_model_line(line, o.model_root));
  const std::vector<probe::SurveyModel> models = probe::select_models(catalogue, o.models, o.model_root);
  const std::vector<probe::SurveyItem> items = probe::plan_items(models, plan_options(o));
  // A T beyond a model's positions: refused here when none exist beyond them, else said once per model and T.
  for (const std::string& warning : probe::check_position_limits(models, items, o.params.seq_len, o.params.long_len))
    if (world.is_root()) log::warn("%s", warning.c_str());
  if (o.dry_run) {
    if (world.is_root()) {
      std::fputs(o.config_text.c_str(), stdout);
      std::printf("# %zu models, %zu items\n", models.size(), items.size());
      for (const probe::SurveyItem& it : items)
        std::printf("# %s -> %s\n", it.id(models).c_str(), models[size_t(it.model)].dir.c_str());
    }
    return 0;
  }
  // After the dry run (a login node has no GPU to plan a GPU job with) and before anything is written: a
  // GPU this rank cannot have is one line, not a half-made results file.
  const Device device = device_from_flag(o.shared.device, "--device", [&](int visible) { return world.local_gpu(visible); });
  if (device.is_cuda())
    log::info("device: %s (%s)", device.name().c_str(), backend_for(device).device_name().c_str());
  train::install_stop_handlers();

  // Rank 0 opens the results file and tells every rank which items are left.
  std::map<int, double> weights;
  std::vector<double> costs;
  for (const probe::SurveyItem& it : items) costs.push_back(item_cost(it, models, o.params, weights));
  std::optional<probe::SurveyWriter> writer;
  std::string done(items.size(), '0');
  if (world.is_root()) {
    probe::SurveyFileOptions file{o.output, o.resume, o.commit_every,
                                  {SINKLAB_VERSION, "", io::now_utc_iso(), o.command_line, o.config_text, cpu_blas_summary()},
                                  probe::params_fingerprint(o.params)};
    writer.emplace(std::move(file), items, models, costs);
    for (size_t i = 0; i < items.size(); ++i) done[i] = writer->done()[i] ? '1' : '0';
  }
  world.broadcast(done);
  std::vector<int64_t> pending;  // queue index -> item index
  std::vector<parallel::WorkItem> work;
  for (size_t i = 0; i < items.size(); ++i)
    if (done[i] == '0') {
      pending.push_back(int64_t(i));
      work.push_back({items[i].model, costs[i]});
    }
  if (world.is_root())
    log::info("survey: %zu models, %zu items (%lld done before), %d ranks -> %s", models.size(), items.size(),
              (long long)writer->already(), world.size(), o.output.c_str());

  parallel::WorkQueue queue(world, work,
                            [&](const parallel::WorkResult& r) { writer->collect(pending[size_t(r.item)], r.rank, r.blob); });
  const probe::MemoryBudget budget = probe::MemoryBudget::resolve(o.params.max_memory, world.local_size(), device);
  if (world.is_root() && budget.auto_)
    log::info("memory per rank: %.1f MiB (%s)", double(budget.bytes) / (1 << 20), budget.origin.c_str());
  probe::ModelCache cache(budget, device, o.params.attention_kernel);
  probe::InputsFinder finder(o.params.survey_inputs_dir);
  probe::InputsFinder hellaswag_finder(o.params.hellaswag_dir, "hellaswag");
  const std::function<void()> progress = [&] {
    try {
      queue.poll();
    } catch (const std::exception& e) {
      throw Fatal(e.what());
    }
    if (train::stop_requested()) queue.request_stop();
    if (queue.stopping()) throw Stopped{};
  };
  bool abandoned = false;
  for (;;) {
    if (train::stop_requested()) queue.request_stop();
    const std::optional<int64_t> next = queue.next();
    if (!next) break;
    const probe::SurveyItem& item = items[size_t(pending[size_t(*next)])];
    const probe::SurveyModel& model = models[size_t(item.model)];
    log::info("measuring %s", item.id(models).c_str());
    Timer timer;
    std::string blob;
    try {
      const io::ResultSet data = probe::measure_item(item, model, o.params, cache, finder, hellaswag_finder, progress);
      blob = probe::encode_item_outcome(true, "", timer.seconds(), data);
    } catch (const Stopped&) {
      abandoned = true;
      continue;  // not recorded: --resume measures it again
    } catch (const Fatal& e) {
      throw Error(e.what());
    } catch (const std::exception& e) {
      blob = probe::encode_item_outcome(false, e.what(), timer.seconds(), io::ResultSet{});
    }
    queue.finish(*next, std::move(blob));
  }
  if (!world.is_root()) return 0;
  const bool stopped = abandoned || queue.stopping() || queue.collected() < int64_t(pending.size());
  return writer->finish(stopped);
}

}  // namespace

int main(int argc, char** argv) {
  auto world = parallel::World::init(argc, argv);
  return run_main(
      "sinklab-survey",
      [&] {
        SurveyOptions o;
        if (!parse(argc, argv, o)) return 0;
        return run(o, world);
      },
      world.abort_hook());
}
