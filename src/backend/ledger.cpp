// The step ledger's writer (ledger.hpp).
#include "backend/ledger.hpp"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "backend/ops.hpp"
#include "core/error.hpp"

namespace sinklab::ledger {
namespace {

struct State {
  std::mutex mutex;
  std::FILE* file = nullptr;
  DeviceCounter counter = nullptr;
  std::vector<std::string> scopes;
  int depth = 0;  // nesting of ops:: calls on the recording thread
  State() {
    const char* path = std::getenv("SINKLAB_LEDGER");
    if (!path || !*path) return;
    file = std::fopen(path, "w");
    SL_CHECK(file != nullptr, "SINKLAB_LEDGER=%s: cannot write the ledger there", path);
  }
  ~State() {
    if (file) std::fclose(file);
  }
};

State& state() {
  static State s;
  return s;
}
std::atomic<bool> g_active{false};
thread_local double t_seconds = -1;  // note_seconds' value for the entry being written
std::once_flag g_open;

std::string scope_path(const State& s) {
  std::string path;
  for (const std::string& part : s.scopes) {
    if (!path.empty()) path += '/';
    path += part;
  }
  return path;
}

void write_tensor(std::string& out, const Tensor& t) {
  out += "{\"dtype\":\"";
  out += dtype_name(t.dtype);
  out += "\",\"shape\":[";
  for (int d = 0; d < t.ndim; ++d) {
    if (d) out += ',';
    out += std::to_string(t.shape[size_t(d)]);
  }
  out += "]}";
}

// ,"device":{...} of what the device did (the counter's events), or ,"device":null without a counter.
void append_events(std::string& out, const DeviceEvents* e) {
  if (!e) {
    out += ",\"device\":null";
    return;
  }
  out += ",\"device\":{\"launches\":" + std::to_string(e->launches);
  out += ",\"library_calls\":" + std::to_string(e->library_calls);
  out += ",\"copies\":" + std::to_string(e->copies);
  out += ",\"host_syncs\":" + std::to_string(e->host_syncs);
  out += ",\"allocations\":" + std::to_string(e->allocations);
  out += ",\"kernels\":[";
  for (size_t i = 0; i < e->kernels.size(); ++i) {
    if (i) out += ',';
    out += "[\"";
    out += e->kernels[i].kernel;
    out += "\",";
    out += std::to_string(e->kernels[i].threads);
    out += ']';
  }
  out += "]}";
}

// Everything the device did since the last op: an entry of its own when there was anything.
void flush_between_ops(State& s) {
  if (!s.counter) return;
  const DeviceEvents e = s.counter();
  if (e.launches + e.library_calls + e.copies + e.host_syncs + e.allocations == 0) return;
  std::string line = "{\"op\":\"(host)\",\"scope\":\"";
  line += scope_path(s);
  line += '"';
  append_events(line, &e);
  line += "}\n";
  std::fputs(line.c_str(), s.file);
}

// Keys a query of `queries` sees under the spec's mask, summed over the queries (lead keys included).
double visible_keys(const ops::AttentionSpec& spec, int64_t queries, int64_t keys) {
  const double T = double(queries), L = double(spec.lead_keys);
  double seen = 0;
  switch (spec.mask) {
    case ops::AttnMask::causal: seen = T * (T + 1) / 2; break;
    case ops::AttnMask::sliding_window: {
      const double w = double(std::max<int64_t>(spec.window, 1));
      seen = T <= w ? T * (T + 1) / 2 : w * (w + 1) / 2 + (T - w) * w;
      break;
    }
    case ops::AttnMask::prefix_lm: {
      const double p = double(std::min(spec.prefix, queries));
      seen = T * (T + 1) / 2 + p * (p - 1) / 2;  // the prefix's queries also see the prefix keys after them
      break;
    }
    default: seen = T * double(keys - spec.lead_keys); break;
  }
  return seen + T * L;
}

}  // namespace

void note_seconds(double seconds) { t_seconds = seconds; }

void set_device_counter(DeviceCounter counter) {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.counter = counter;
}

bool active() {
  std::call_once(g_open, [] { g_active = state().file != nullptr; });
  return g_active.load(std::memory_order_relaxed);
}

Scope::Scope(const char* name, int64_t index) {
  if (!active()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.scopes.push_back(index >= 0 ? std::string(name) + std::to_string(index) : std::string(name));
  pushed_ = true;
}

Scope::~Scope() {
  if (!pushed_) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  flush_between_ops(s);  // what the scope did outside ops belongs to it
  const std::string closed = s.scopes.back();
  s.scopes.pop_back();
  // SINKLAB_LEDGER_LAST=<scope>: the ledger's run ends when that outermost scope closes (a counted run's
  // later steps, evaluation and checkpoint are not what it measures, and their host code reads device
  // memory the counting never wrote).
  const char* last = std::getenv("SINKLAB_LEDGER_LAST");
  if (s.scopes.empty() && last && closed == last) {
    std::fclose(s.file);
    s.file = nullptr;
    std::_Exit(0);
  }
}

double op_bytes(const CallFacts& facts) {
  double bytes = 0;
  for (const Tensor& t : facts.tensors)
    if (t.defined()) bytes += double(t.nbytes());
  return bytes;
}

double op_flops(const std::string& op, const CallFacts& facts) {
  const auto& t = facts.tensors;
  auto dim = [&](size_t i, int d) { return double(t[i].shape[size_t(d < 0 ? d + t[i].ndim : d)]); };
  if (op == "linear_forward") return 2 * double(t[0].numel()) * dim(1, -1);  // out[M,N], in[M,K]
  if (op == "linear_backward") {  // d_in, d_weight, d_bias, d_out[M,N], in[M,K], weight[N,K]
    const double mnk = double(t[3].numel()) * (t[5].defined() ? dim(5, -1) : dim(4, -1));
    return 2 * mnk * ((t[0].defined() ? 1 : 0) + (t[1].defined() ? 1 : 0));
  }
  if (op == "matmul") {  // out[(b,) M, N] = op(a) op(b): K is a's inner dim unless transposed
    const bool ta = !facts.flags.empty() && facts.flags[0];
    return 2 * double(t[0].numel()) * (ta ? dim(1, -2) : dim(1, -1));
  }
  if (facts.attention && (op == "attention_forward" || op == "attention_backward")) {
    // forward (out, stats, q, k, ...): q [B,T,H,dh], k [B,S,Hkv,dh]; backward (d_q, d_k, d_v, d_out, q, k, ...)
    const size_t q = op == "attention_forward" ? 2 : 4, k = q + 1;
    const double pairs = dim(q, 0) * dim(q, 2) * visible_keys(*facts.attention, t[q].shape[1], t[k].shape[1]);
    return (op == "attention_forward" ? 4 : 10) * pairs * dim(q, 3);
  }
  return 0;
}

OpCall::OpCall(const char* op, const CallFacts& facts) {
  if (!active()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (s.depth++ > 0) return;
  top_ = true;
  op_ = op;
  facts_ = &facts;
  flush_between_ops(s);
}

OpCall::~OpCall() {
  if (!active()) return;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  --s.depth;
  if (!top_) return;
  const CallFacts& f = *facts_;
  std::string line = "{\"op\":\"";
  line += op_;
  line += "\",\"scope\":\"";
  line += scope_path(s);
  line += "\",\"operands\":[";
  bool first = true;
  for (const Tensor& t : f.tensors) {
    if (!t.defined()) continue;
    if (!first) line += ",";
    first = false;
    write_tensor(line, t);
  }
  line += "]";
  // A dtype conversion: a copy between two dtypes (anything else that converts does so inside a kernel,
  // which the device's kernel list shows).
  const bool converts = std::string(op_) == "copy" && f.tensors.size() == 2 && f.tensors[0].dtype != f.tensors[1].dtype;
  char numbers[160];
  std::snprintf(numbers, sizeof numbers, ",\"bytes\":%.0f,\"flops\":%.0f,\"converts\":%s", op_bytes(f),
                op_flops(op_, f), converts ? "true" : "false");
  line += numbers;
  if (t_seconds >= 0) {
    std::snprintf(numbers, sizeof numbers, ",\"seconds\":%.9f", t_seconds);
    line += numbers;
    t_seconds = -1;
  }
  if (s.counter) {
    const DeviceEvents e = s.counter();
    append_events(line, &e);
  } else {
    append_events(line, nullptr);
  }
  line += "}\n";
  std::fputs(line.c_str(), s.file);
}

}  // namespace sinklab::ledger
