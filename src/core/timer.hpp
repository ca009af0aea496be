// Wall-clock timing on the steady clock.
#pragma once

#include <chrono>
#include <cstdio>
#include <string>

namespace sinklab {

class Timer {
 public:
  Timer() : start_(std::chrono::steady_clock::now()) {}
  void reset() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  std::chrono::steady_clock::time_point start_;
};

// A duration as "HH:MM:SS" (hours grow past 99), for progress lines.
inline std::string hms(double seconds) {
  const long s = long(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%02ld:%02ld:%02ld", s / 3600, (s / 60) % 60, s % 60);
  return buf;
}

}  // namespace sinklab
