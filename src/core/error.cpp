#include "core/error.hpp"

#include <cstdarg>
#include <cstdio>
#include <exception>
#include <vector>

namespace sinklab {

std::string strfmt(const char* fmt, ...) {
  va_list args;
  va_start(args, fmt);
  va_list copy;
  va_copy(copy, args);
  int n = std::vsnprintf(nullptr, 0, fmt, copy);
  va_end(copy);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), size_t(n) + 1, fmt, args);
  va_end(args);
  return out;
}

// The message is what the user sees; the source location would only be noise for a user error.
[[noreturn]] void throw_error(const char*, int, const std::string& msg) { throw Error(msg); }

int run_main(const char* program, const std::function<int()>& body,
             const std::function<void(int)>& abort_hook) {
  int status = 0;
  try {
    return body();
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    status = 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", program, e.what());
    status = 2;
  }
  std::fflush(stderr);
  if (abort_hook) abort_hook(status);
  return status;
}

}  // namespace sinklab
