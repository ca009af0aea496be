#include "train/schedule.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace sinklab::train {

LrSchedule parse_lr_schedule(const std::string& name) {
  if (name == "constant") return LrSchedule::constant;
  if (name == "cosine") return LrSchedule::cosine;
  SL_FAIL("--lr-schedule: unknown schedule \"%s\" (expected cosine or constant)", name.c_str());
}

const char* lr_schedule_name(LrSchedule s) { return s == LrSchedule::constant ? "constant" : "cosine"; }

void validate(const ScheduleConfig& cfg) {
  SL_CHECK(cfg.lr >= 0, "--lr must be >= 0 (got %g)", cfg.lr);
  SL_CHECK(cfg.min_lr >= 0 && cfg.min_lr <= cfg.lr, "--min-lr must lie in [0, --lr = %g] (got %g)", cfg.lr,
           cfg.min_lr);
  SL_CHECK(cfg.warmup_steps >= 0, "--warmup-steps must be >= 0 (got %lld)", (long long)cfg.warmup_steps);
  SL_CHECK(cfg.total_steps >= 1, "--steps must be >= 1 (got %lld)", (long long)cfg.total_steps);
}

double learning_rate(const ScheduleConfig& cfg, int64_t step) {
  SL_CHECK(step >= 0, "learning_rate: negative step %lld", (long long)step);
  if (step < cfg.warmup_steps) return cfg.lr * double(step + 1) / double(cfg.warmup_steps);
  if (cfg.kind == LrSchedule::constant) return cfg.lr;
  const int64_t span = cfg.total_steps - cfg.warmup_steps;
  double p = span > 0 ? double(step - cfg.warmup_steps + 1) / double(span) : 1.0;
  p = std::clamp(p, 0.0, 1.0);
  if (p == 1.0) return cfg.min_lr;  // exact at the last step (cos(pi) rounding aside)
  return cfg.min_lr + (cfg.lr - cfg.min_lr) * 0.5 * (1.0 + std::cos(M_PI * p));
}

}  // namespace sinklab::train
