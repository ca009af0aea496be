// Errors a user can cause end in one clear line: code throws sinklab::Error with a message that names
// the file or flag, and each binary's main() prints it once and exits non-zero (run_main below).
#pragma once

#include <functional>
#include <stdexcept>
#include <string>

namespace sinklab {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// printf-style formatting into a std::string.
std::string strfmt(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

[[noreturn]] void throw_error(const char* file, int line, const std::string& msg);

// Runs body, turning a sinklab::Error (or any std::exception) into "<program>: error: <what>" on stderr
// and exit status 1. `abort_hook`, when set (MPI jobs), is called instead of returning so one rank's
// error ends the whole job.
int run_main(const char* program, const std::function<int()>& body,
             const std::function<void(int)>& abort_hook = {});

}  // namespace sinklab

// SL_CHECK(cond, fmt, ...): throw sinklab::Error with the formatted message when cond is false.
#define SL_CHECK(cond, ...)                                                 \
  do {                                                                      \
    if (!(cond)) ::sinklab::throw_error(__FILE__, __LINE__, ::sinklab::strfmt(__VA_ARGS__)); \
  } while (0)
#define SL_FAIL(...) ::sinklab::throw_error(__FILE__, __LINE__, ::sinklab::strfmt(__VA_ARGS__))
