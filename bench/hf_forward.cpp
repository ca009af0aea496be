// Survey forward throughput of an HF model directory: sinklab's family forward with the sink probe
// (probe::ModelProbe: every layer's attention probabilities from the taps, alpha, massive activations)
// over a fixed set of token sequences. bench/run_hf_survey.sh runs it beside transformers eager with
// output_attentions=True (bench/peers/transformers_forward.py) on the same directory and inputs.
//
//   hf_forward --model DIR --ids IDS.safetensors [--batch 100] [--repeat 3] [--threads 0]
//              [--mode probe|logits] [--max-memory BYTES]
//
// IDS.safetensors holds "ids" i32 [N,T]. probe: no logits (the survey's work: transformers' base model
// with output_attentions on the peer side); logits: the head too, [batch,T,V] per batch (the peer's
// CausalLM). Prints one line: sequences/s of the best of `repeat` passes over all N sequences, the
// process's peak RSS (VmHWM) and the load time. seqs_per_cpu_s divides by the CPU time of all threads
// instead of the wall clock (the better measure on a machine shared with other jobs).
//
// Under mpirun the ranks split the N sequences into contiguous shares, as sinklab-survey's ranks share
// its items: a pass starts on a barrier and lasts until the slowest rank is done; CPU time and peak
// RSS are summed over the ranks (every rank holds its own copy of the weights).
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "backend/memory.hpp"
#include "parallel/mpi.hpp"
#include "core/error.hpp"
#include "hf/hf_model.hpp"
#include "io/safetensors.hpp"
#include "probe/model_probe.hpp"
#include "probe/survey_metrics.hpp"

using namespace sinklab;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// CPU seconds of every thread of the process: on a machine shared with other jobs this, unlike the
// wall clock, does not count the time slices others took (spinning OpenMP threads do count).
double cpu_now() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

long status_kb(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(key, 0) == 0 && line[std::strlen(key)] == ':') return std::stol(line.substr(std::strlen(key) + 1));
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  auto world = parallel::World::init(argc, argv);
  return run_main("hf_forward", [&]() {
    std::string model_dir, ids_path, mode = "probe", probe_kind = "survey";
    int64_t batch = 100, repeat = 3, max_memory = 0;
    int threads = 0;
    for (int i = 1; i < argc; i += 2) {
      const std::string k = argv[i];
      SL_CHECK(i + 1 < argc, "%s needs a value", k.c_str());
      const std::string v = argv[i + 1];
      if (k == "--model") model_dir = v;
      else if (k == "--ids") ids_path = v;
      else if (k == "--mode") mode = v;
      else if (k == "--probe") probe_kind = v;
      else if (k == "--batch") batch = std::stoll(v);
      else if (k == "--repeat") repeat = std::stoll(v);
      else if (k == "--threads") threads = std::stoi(v);
      else if (k == "--max-memory") max_memory = std::stoll(v);
      else SL_FAIL("unknown flag %s", k.c_str());
    }
    SL_CHECK(!model_dir.empty() && !ids_path.empty(), "usage: hf_forward --model DIR --ids IDS.safetensors [...]");
    SL_CHECK(mode == "probe" || mode == "logits", "--mode must be probe or logits, got %s", mode.c_str());
    SL_CHECK(probe_kind == "survey" || probe_kind == "model", "--probe must be survey or model, got %s", probe_kind.c_str());
    SL_CHECK(batch >= 1 && repeat >= 1, "--batch and --repeat must be >= 1");

    io::SafetensorsFile ids_file(ids_path);
    Tensor all_ids = ids_file.view("ids");
    SL_CHECK(all_ids.dtype == DType::i32 && all_ids.ndim == 2, "%s: ids must be i32 [N,T]", ids_path.c_str());
    const int64_t N = all_ids.shape[0], T = all_ids.shape[1];
    // This rank's share of the sequences: [first, first + mine).
    const int64_t first = N * world.rank() / world.size(), mine = N * (world.rank() + 1) / world.size() - first;
    SL_CHECK(mine >= 1, "%lld sequences cannot be shared by %d ranks", (long long)N, world.size());

    const double t_load = now();
    hf::LoadOptions lo;
    lo.threads = threads;
    lo.max_memory_bytes = max_memory;
    std::unique_ptr<hf::HfModel> model = hf::load_model(model_dir, lo);
    const hf::HfModelInfo& info = model->info();
    const double load_s = now() - t_load;

    const bool logits_wanted = mode == "logits";
    Buffer logits_buf;
    if (logits_wanted) logits_buf = Buffer::for_tensor(DType::f32, {batch, T, int64_t(info.vocab_size)});
    hf::ForwardOptions opt;
    opt.want_logits = logits_wanted;
    // survey: sinklab-survey's observer with its defaults (K = 8, no QK or attention maps); model: the
    // trainer's lighter ModelProbe (alpha, Sink_1, massive activations only).
    std::unique_ptr<LayerObserver> observer;
    if (probe_kind == "survey") {
      probe::SurveyShape shape;
      shape.n_layers = info.n_layers;
      for (int l = 0; l < info.n_layers; ++l) shape.attention_layers.push_back(l);
      shape.n_heads = info.n_heads;
      shape.n_kv_heads = info.n_kv_heads;
      shape.seq_len = T;
      shape.max_k = int(std::min<int64_t>(8, T));
      observer = std::make_unique<probe::SurveyProbe>(shape);
    } else {
      observer = std::make_unique<probe::ModelProbe>(info.n_layers, info.n_heads, T, 4);
    }
    auto pass = [&](int64_t limit) {
      for (int64_t s0 = 0; s0 < limit; s0 += batch) {
        const int64_t b = std::min(batch, limit - s0);
        Tensor logits = logits_wanted ? logits_buf.view(DType::f32, {b, T, int64_t(info.vocab_size)}) : Tensor{};
        model->forward(all_ids.slice(0, first + s0, b), observer.get(), logits, opt);
      }
    };
    pass(std::min(batch, mine));  // warm-up: activations allocated, pages touched
    double best = 1e30, best_cpu = 1e30;
    for (int64_t r = 0; r < repeat; ++r) {
      world.barrier();
      const double t0 = now(), c0 = cpu_now();
      pass(mine);
      const double wall = now() - t0, cpu = cpu_now() - c0;
      best = std::min(best, world.allreduce_max(wall));
      best_cpu = std::min(best_cpu, world.allreduce_sum(cpu));
    }
    const double peak_mib = world.allreduce_sum(double(status_kb("VmHWM")) / 1024.0);
    const double load_max_s = world.allreduce_max(load_s);
    double sink1 = 0.0;  // Sink_1^0.3 of layer 1 head 0 (model) / row 0, eps 0.3 (survey): a sanity print
    if (auto* sp = dynamic_cast<probe::SurveyProbe*>(observer.get())) sink1 = sp->result().sink_k.at(1);
    else if (auto* mp = dynamic_cast<probe::ModelProbe*>(observer.get())) { const auto r = mp->result(); sink1 = r.sink.size() > 1 ? r.sink[1] : 0.0; }
    if (world.is_root())
      std::printf("sinklab mode=%s seqs=%lld T=%lld batch=%lld ranks=%d seqs_per_s=%.2f seqs_per_cpu_s=%.2f "
                  "peak_mib=%.1f load_s=%.2f weights_mib=%.1f probe=%s sink_eps0.3=%.2f\n",
                  mode.c_str(), (long long)N, (long long)T, (long long)batch, world.size(), double(N) / best,
                  double(N) / best_cpu, peak_mib, load_max_s, double(info.weight_bytes) / (1 << 20),
                  probe_kind.c_str(), sink1);
    return 0;
  }, world.abort_hook());
}
