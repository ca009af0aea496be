// Learning-rate schedules: linear warmup, then constant or cosine decay.
//
// Steps are 0-based optimizer steps (step s is the (s+1)-th update). Warmup follows the torch
// LambdaLR convention lr * min(1, (s+1)/warmup): the first update already moves (lr/warmup, never a
// wasted zero-lr step) and step warmup-1 is the first at the peak lr. After warmup:
//   constant  lr (what the paper's released code does)
//   cosine    min_lr + (lr - min_lr) * (1 + cos(pi * p)) / 2,  p = (s - warmup + 1) / (total - warmup)
//             so the peak is held at step warmup-1, the midpoint p = 1/2 is exactly (lr + min_lr)/2 and
//             the last step s = total-1 uses exactly min_lr (what the paper's text describes). Steps past
//             the end stay at min_lr.
#pragma once

#include <cstdint>
#include <string>

namespace sinklab::train {

enum class LrSchedule { constant, cosine };

// "constant" | "cosine"; anything else throws naming --lr-schedule.
LrSchedule parse_lr_schedule(const std::string& name);
const char* lr_schedule_name(LrSchedule s);

struct ScheduleConfig {
  LrSchedule kind = LrSchedule::cosine;
  double lr = 4e-4;         // peak
  double min_lr = 0.0;      // cosine floor (reached at the last step)
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;  // cosine: the last step is total_steps - 1
};

// Throws naming the flag for negative values, min_lr > lr, or total_steps < 1.
void validate(const ScheduleConfig& cfg);
double learning_rate(const ScheduleConfig& cfg, int64_t step);

}  // namespace sinklab::train
