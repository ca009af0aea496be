// How every binary reads its options: flags on the command line plus an optional `--config <file>.ini`
// with the same names (`name = value` lines; flags win), and the effective configuration written back
// as ini text for the results file.
#pragma once

#include <boost/program_options.hpp>
#include <initializer_list>
#include <set>
#include <string>

namespace sinklab {

// The options a --config file gave their values (the command line did not override them): a later check
// of such a value names the file as well as the key.
struct ConfigFileKeys {
  std::string file;
  std::set<std::string> keys;
  // "<file>: <message>" when the message is about one of keys (begins with its "--key"), else the message.
  std::string attribute(const std::string& message) const;
};

// Parses argv, then the --config file when the description has that option and it was given; then
// notifies. Returns false (after printing the options) for --help. Errors throw sinklab::Error naming
// the flag or the file. from_file, when given, receives the options the --config file set.
bool parse_options(int argc, char** argv, const boost::program_options::options_description& desc,
                   boost::program_options::variables_map& vm, ConfigFileKeys* from_file = nullptr);

// Every option with its value as `name = value` lines, sorted by name, except those in `skip`.
// Multi-valued options give one line per value.
std::string options_as_ini(const boost::program_options::variables_map& vm, std::initializer_list<const char*> skip);

// argv joined by spaces.
std::string command_line_of(int argc, char** argv);

}  // namespace sinklab
