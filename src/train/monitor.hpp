// The training loop's stability monitor (paper App. D, Fig. 30: does a model without a sink fine-tune
// as stably as one with it?), written every step by the trainer into results.h5:
//
//   /runs/<run>/train     loss, grad_norm, ... (one row per step, as always)
//   /runs/<run>/monitor   step, skipped (1: a non-finite step that --on-nonfinite skip left out),
//                         nonfinite_steps (the count of non-finite steps so far),
//                         layer_grad_norm [step, L]   ||g_l|| of layer l's parameters (before clipping),
//                         update_ratio [step, L]      ||theta_l after - theta_l before|| / ||theta_l after||
//                                                     (0 for a skipped step),
//                         max_abs_activation [step, L] max |x| of the residual stream leaving layer l over
//                                                     the step's global batch (every micro-batch, every rank)
//   /runs/<run>/events    step, kind, value, window_mean, window_std: one row per event, with
//                         attribute "kinds" = kEventKinds (0 non-finite step, 1 loss spike, 2 grad-norm
//                         spike); each event is also a log line.
//
// A spike is a finite value above mean + k std (population std) of the previous `window` finite values
// of the same series, once that many have been seen. The spike itself then joins the window. The
// detector is rebuilt on --resume from the train columns, so a resumed run flags what an
// uninterrupted one does.
//
// Test hooks (for tests only; environment variables, so that no job file can set them by accident):
//   SINKLAB_TEST_NAN_GRAD_STEP=<s>    the all-reduced gradient of 0-based step s gets a NaN (element 0)
//   SINKLAB_TEST_LOSS_SPIKE_STEP=<s>  the loss recorded for step s is multiplied by 100 (the detector and
//                                     results see it; training itself is unchanged)
#pragma once

#include <cstdint>
#include <deque>

namespace sinklab::train {

inline constexpr const char* kEventKinds = "0 non-finite step, 1 loss spike, 2 grad-norm spike";
enum class EventKind : int { nonfinite = 0, loss_spike = 1, grad_norm_spike = 2 };

class SpikeDetector {
 public:
  SpikeDetector(double sigma, int64_t window) : sigma_(sigma), window_(window) {}
  // Whether x is a spike against the window (mean and std of the window returned either way, NaN while
  // the window is not yet full); then x joins the window. Non-finite x: never a spike, not added.
  bool observe(double x, double* mean, double* std);

 private:
  double sigma_;
  int64_t window_;
  std::deque<double> values_;
};

// The step number of a test hook (above), or -1 when its variable is not set.
int64_t test_hook_step(const char* variable);

}  // namespace sinklab::train
