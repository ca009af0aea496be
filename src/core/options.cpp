#include "core/options.hpp"

#include <algorithm>
#include <fstream>
#include <iostream>
#include <sstream>
#include <vector>

#include "core/error.hpp"

namespace sinklab {

namespace po = boost::program_options;

bool parse_options(int argc, char** argv, const po::options_description& desc, po::variables_map& vm) {
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    if (vm.count("help")) {
      std::cout << desc << "\n";
      return false;
    }
    if (vm.count("config")) {
      const std::string file = vm["config"].as<std::string>();
      std::ifstream in(file);
      SL_CHECK(in.good(), "--config: cannot open %s", file.c_str());
      try {
        po::store(po::parse_config_file(in, desc), vm);
      } catch (const po::error& e) {
        SL_FAIL("%s: %s", file.c_str(), e.what());
      }
    }
    po::notify(vm);
  } catch (const po::error& e) {
    SL_FAIL("%s (see --help)", e.what());
  }
  return true;
}

std::string options_as_ini(const po::variables_map& vm, std::initializer_list<const char*> skip) {
  std::ostringstream ini;
  for (const auto& kv : vm) {
    if (std::any_of(skip.begin(), skip.end(), [&](const char* s) { return kv.first == s; })) continue;
    const auto& v = kv.second.value();
    auto line = [&](const auto& value) { ini << kv.first << " = " << value << "\n"; };
    if (auto p = boost::any_cast<std::string>(&v)) line(*p);
    else if (auto i = boost::any_cast<int>(&v)) line(*i);
    else if (auto l = boost::any_cast<int64_t>(&v)) line(*l);
    else if (auto u = boost::any_cast<uint64_t>(&v)) line(*u);
    else if (auto d = boost::any_cast<double>(&v)) line(*d);
    else if (auto b = boost::any_cast<bool>(&v)) line(*b ? "true" : "false");
    else if (auto s = boost::any_cast<std::vector<std::string>>(&v))
      for (const std::string& x : *s) line(x);
  }
  return ini.str();
}

std::string command_line_of(int argc, char** argv) {
  std::ostringstream cmd;
  for (int i = 0; i < argc; ++i) cmd << (i ? " " : "") << argv[i];
  return cmd.str();
}

}  // namespace sinklab
