#include "core/text.hpp"

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

std::vector<double> parse_number_list(const std::string& text, const char* flag) {
  std::vector<double> out;
  for (const std::string& item : split_commas(text)) {
    size_t used = 0;
    try {
      out.push_back(std::stod(item, &used));
    } catch (const std::logic_error&) {
      used = 0;
    }
    SL_CHECK(used == item.size() && used > 0, "--%s: '%s' is not a number", flag, item.c_str());
  }
  return out;
}

}  // namespace sinklab
