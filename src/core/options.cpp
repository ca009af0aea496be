#include "core/options.hpp"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>
#include <vector>

#include "core/error.hpp"

namespace sinklab {

namespace po = boost::program_options;

namespace {

// Boost.Program_options (1.74) formats an error by replacing placeholders such as %value% in its message
// with the offending text, in a loop that never ends when that text itself holds a placeholder: what()
// hangs (found by tests/fuzz/fuzz_options). Where an input holds '%', the error is reported without what().
std::string first_word_with_percent(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).find('%') != std::string::npos) return argv[i];
  return "";
}

std::string first_ini_line_with_percent(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    const std::string content = line.substr(0, line.find('#'));  // '#' starts a comment in Boost's ini syntax
    if (content.find('%') != std::string::npos) return "line " + std::to_string(number) + " '" + line + "'";
  }
  return "";
}

}  // namespace

// The keys a parse gave a value.
std::set<std::string> keys_of(const po::parsed_options& parsed) {
  std::set<std::string> keys;
  for (const po::option& o : parsed.options) keys.insert(o.string_key);
  return keys;
}

std::string ConfigFileKeys::attribute(const std::string& message) const {
  for (const std::string& key : keys) {
    const std::string flag = "--" + key;
    if (!message.starts_with(flag)) continue;
    const char next = message.size() > flag.size() ? message[flag.size()] : ' ';
    if (!std::isalnum(static_cast<unsigned char>(next)) && next != '-') return file + ": " + message;
  }
  return message;
}

bool parse_options(int argc, char** argv, const po::options_description& desc, po::variables_map& vm,
                   ConfigFileKeys* from_file) {
  // Where the first '%' of the input is ("" when none): errors are then reported without Boost's what().
  std::string percent_at = first_word_with_percent(argc, argv);
  if (!percent_at.empty()) percent_at = "'" + percent_at + "'";
  auto fail = [&](const po::error& e, const std::string& where) {
    if (!percent_at.empty()) SL_FAIL("%scannot parse the options (at or before %s; see --help)", where.c_str(),
                                     percent_at.c_str());
    SL_FAIL("%s%s (see --help)", where.c_str(), e.what());
  };
  std::set<std::string> on_command_line;
  try {
    const po::parsed_options parsed = po::parse_command_line(argc, argv, desc);
    on_command_line = keys_of(parsed);
    po::store(parsed, vm);
  } catch (const po::error& e) {
    fail(e, "");
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return false;
  }
  if (vm.count("config")) {
    const std::string file = vm["config"].as<std::string>();
    std::error_code ec;
    SL_CHECK(!std::filesystem::is_directory(file, ec), "--config: %s is a directory, not an ini file", file.c_str());
    std::ifstream in(file);
    SL_CHECK(in.good(), "--config: cannot open %s", file.c_str());
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (percent_at.empty()) percent_at = first_ini_line_with_percent(text);
    try {
      std::istringstream ini(text);
      const po::parsed_options parsed = po::parse_config_file(ini, desc);
      if (from_file) {
        from_file->file = file;
        for (const std::string& key : keys_of(parsed))
          if (!on_command_line.count(key)) from_file->keys.insert(key);
      }
      po::store(parsed, vm);
    } catch (const po::error& e) {
      fail(e, file + ": ");
    }
  }
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    fail(e, "");
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
