#include "core/text.hpp"

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <stdexcept>

#include "core/error.hpp"

namespace sinklab {

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

double parse_real(const std::string& text, const char* flag) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  SL_CHECK(used == text.size() && used > 0, "%s: '%s' is not a number", flag, text.c_str());
  return value;
}

int64_t parse_integer(const std::string& text, const char* flag) {
  size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::logic_error&) {
    used = 0;
  }
  SL_CHECK(used == text.size() && used > 0, "%s: '%s' is not an integer", flag, text.c_str());
  return int64_t(value);
}

std::vector<double> parse_number_list(const std::string& text, const char* flag) {
  std::vector<double> out;
  const std::string name = std::string("--") + flag;
  for (const std::string& item : split_commas(text)) out.push_back(parse_real(item, name.c_str()));
  return out;
}

std::string number_text(double x) {
  char buf[64];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

}  // namespace sinklab
