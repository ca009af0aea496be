#include "core/log.hpp"

#include <cstdarg>
#include <cstdio>
#include <mutex>

namespace sinklab::log {
namespace {
int g_rank = 0;
int g_world = 1;
std::mutex g_mutex;

void emit(FILE* stream, const char* tag, const char* fmt, va_list args) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_world > 1) std::fprintf(stream, "[rank %d] ", g_rank);
  if (tag) std::fputs(tag, stream);
  std::vfprintf(stream, fmt, args);
  std::fputc('\n', stream);
  std::fflush(stream);
}
}  // namespace

void set_rank(int rank, int world_size) {
  g_rank = rank;
  g_world = world_size;
}
int rank() { return g_rank; }

void info(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  emit(stdout, nullptr, fmt, args);
  va_end(args);
}
void warn(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  emit(stderr, "warning: ", fmt, args);
  va_end(args);
}
void info0(const char* fmt, ...) {
  if (g_rank != 0) return;
  va_list args;
  va_start(args, fmt);
  emit(stdout, nullptr, fmt, args);
  va_end(args);
}

}  // namespace sinklab::log
