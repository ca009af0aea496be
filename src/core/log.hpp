// Logging with a rank prefix ("[rank 1] ..."), printf-style. Rank is set once by parallel/ at start-up;
// single-process runs print no prefix.
#pragma once

namespace sinklab::log {

void set_rank(int rank, int world_size);
int rank();
void info(const char* fmt, ...) __attribute__((format(printf, 1, 2)));   // stdout, every rank
void warn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));   // stderr, every rank
void info0(const char* fmt, ...) __attribute__((format(printf, 1, 2)));  // stdout, rank 0 only

}  // namespace sinklab::log
