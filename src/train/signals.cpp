#include "train/signals.hpp"

#include <atomic>
#include <csignal>
#include <cstring>

#include "core/error.hpp"

namespace sinklab::train {
namespace {

std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the stop flag must be lock-free to be set in a signal handler");

extern "C" void sinklab_stop_handler(int sig) { g_stop_signal.store(sig, std::memory_order_relaxed); }

}  // namespace

void install_stop_handlers() {
  struct sigaction sa;
  std::memset(&sa, 0, sizeof(sa));
  sa.sa_handler = sinklab_stop_handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted reads/writes resume: the step in flight completes
  for (int sig : {SIGTERM, SIGUSR1})
    SL_CHECK(::sigaction(sig, &sa, nullptr) == 0, "cannot install the handler for signal %d", sig);
}

bool stop_requested() { return g_stop_signal.load(std::memory_order_relaxed) != 0; }
int stop_signal() { return g_stop_signal.load(std::memory_order_relaxed); }
void request_stop() { g_stop_signal.store(-1, std::memory_order_relaxed); }
void clear_stop_request() { g_stop_signal.store(0, std::memory_order_relaxed); }

}  // namespace sinklab::train
