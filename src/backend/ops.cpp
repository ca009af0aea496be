// ops:: entry points: forward each call to the backend of its tensors' device (backend.hpp), made from
// the op list (op_list.hpp) together with the Backend's default bodies.
// SINKLAB_PROFILE=1 in the environment times every op (host wall clock, so a device backend's ops
// are timed after a synchronize) and prints the totals per op at exit.
#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/ledger.hpp"
#include "core/error.hpp"

namespace sinklab {
namespace {

class OpProfile {
 public:
  static OpProfile& get() {
    static OpProfile profile;
    return profile;
  }
  bool enabled() const { return enabled_; }
  void add(const char* op, double seconds) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& e = totals_[op];
    e.first += 1;
    e.second += seconds;
  }
  ~OpProfile() {
    if (!enabled_ || totals_.empty()) return;
    std::vector<std::pair<std::string, std::pair<long, double>>> rows(totals_.begin(), totals_.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    double total = 0;
    for (const auto& r : rows) total += r.second.second;
    std::fprintf(stderr, "sinklab op profile (SINKLAB_PROFILE): %.3f s in ops\n", total);
    for (const auto& r : rows)
      std::fprintf(stderr, "  %-22s %8ld calls %10.3f s %6.1f%%\n", r.first.c_str(), r.second.first, r.second.second,
                   100.0 * r.second.second / total);
  }

 private:
  OpProfile() : enabled_(std::getenv("SINKLAB_PROFILE") != nullptr) {}
  bool enabled_;
  std::mutex mutex_;
  std::map<std::string, std::pair<long, double>> totals_;
};

// Times one op call when profiling is on.
class OpTimer {
 public:
  OpTimer(const char* op, Backend& backend) : op_(op), backend_(backend) {
    if (OpProfile::get().enabled()) start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (!OpProfile::get().enabled()) return;
    backend_.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    OpProfile::get().add(op_, seconds);
    ledger::note_seconds(seconds);  // the ledger's entry of this call, when one is open, carries it
  }

 private:
  const char* op_;
  Backend& backend_;
  std::chrono::steady_clock::time_point start_;
};

// The operand of an op's argument list that picks its backend: the argument itself when it is a tensor,
// an undefined tensor (which backend_for skips) for a number or a configuration.
Tensor operand(const Tensor& t) { return t; }
template <class Arg>
Tensor operand(const Arg&) {
  return Tensor{};
}
template <class... Args>
std::array<Tensor, sizeof...(Args)> operands(const Args&... args) {
  return {operand(args)...};
}

// What the step ledger (ledger.hpp) records of a call's arguments: its tensors, bools and attention spec.
void add_fact(ledger::CallFacts& f, const Tensor& t) { f.tensors.push_back(t); }
void add_fact(ledger::CallFacts& f, bool b) { f.flags.push_back(b); }
void add_fact(ledger::CallFacts& f, const ops::AttentionSpec& spec) { f.attention = &spec; }
template <class Arg>
void add_fact(ledger::CallFacts&, const Arg&) {}
template <class... Args>
ledger::CallFacts facts_of(const Args&... args) {
  ledger::CallFacts f;
  if (ledger::active()) (add_fact(f, args), ...);
  return f;
}

// The arguments of an op that a backend has no kernel for: in the signature, read by nothing.
template <class... Args>
void unused(const Args&...) {}

}  // namespace

void Backend::no_kernel(const char* op) const {
  SL_FAIL("no %s kernel on the %s backend in this build", op, name());
}

// The Backend defaults (backend_interface.hpp), one per op of op_list.hpp: "no <op> kernel on the <device> backend".
#define SINKLAB_OP_NO_KERNEL(ret, name, params, args) \
  ret Backend::name params {                          \
    unused args;                                      \
    no_kernel(#name);                                 \
  }
SINKLAB_OPS(SINKLAB_OP_NO_KERNEL, SINKLAB_OP_NO_KERNEL)
#undef SINKLAB_OP_NO_KERNEL

// The ops:: entry points of ops.hpp, one per op of op_list.hpp: the backend of the tensors' device runs
// the op (timed when profiling, recorded when the step ledger is open). Defined by qualified name, so a
// signature ops.hpp lacks does not compile.
#define SINKLAB_OP_ENTRY_POINT(ret, name, params, args)   \
  ret ops::name params {                                  \
    Backend& backend = backend_for(operands args, #name); \
    const ledger::CallFacts facts = facts_of args;        \
    ledger::OpCall record(#name, facts);                  \
    OpTimer timer(#name, backend);                        \
    return backend.name args;                             \
  }
SINKLAB_OPS(SINKLAB_OP_ENTRY_POINT, SINKLAB_OP_ENTRY_POINT)
#undef SINKLAB_OP_ENTRY_POINT

}  // namespace sinklab

namespace sinklab::ops {

// The composite ops, written over the ones above.
double global_norm(std::span<const Tensor> grads) {
  double total = 0.0;
  for (const Tensor& g : grads) total += sum_squares(g);
  return std::sqrt(total);
}

double clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  double norm = global_norm(grads);
  if (norm > max_norm) {
    double coef = max_norm / (norm + 1e-6);
    for (const Tensor& g : grads) scale(g, coef);
  }
  return norm;
}

}  // namespace sinklab::ops
