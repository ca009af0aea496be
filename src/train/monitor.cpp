#include "train/monitor.hpp"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string>

#include "core/error.hpp"

namespace sinklab::train {

bool SpikeDetector::observe(double x, double* mean, double* std) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  double m = nan, s = nan;
  if (int64_t(values_.size()) == window_) {
    double sum = 0.0, sq = 0.0;
    for (double v : values_) sum += v;
    m = sum / double(window_);
    for (double v : values_) sq += (v - m) * (v - m);
    s = std::sqrt(sq / double(window_));
  }
  if (mean) *mean = m;
  if (std) *std = s;
  if (!std::isfinite(x)) return false;
  const bool spike = std::isfinite(m) && x > m + sigma_ * s;
  values_.push_back(x);
  if (int64_t(values_.size()) > window_) values_.pop_front();
  return spike;
}

int64_t test_hook_step(const char* variable) {
  const char* value = std::getenv(variable);
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long long step = std::strtoll(value, &end, 10);
  SL_CHECK(*end == '\0' && step >= 0, "%s=%s is not a step number", variable, value);
  return step;
}

}  // namespace sinklab::train
