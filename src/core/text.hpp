// Comma-separated option values ("a.bin,b.bin", "0.2,0.3,0.4"), parsed one way for every binary.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sinklab {

// The non-empty items of a comma-separated list.
std::vector<std::string> split_commas(const std::string& text);
// Every item as a number; a malformed item throws sinklab::Error naming --flag.
std::vector<double> parse_number_list(const std::string& text, const char* flag);
// One number (the whole text); malformed text throws naming `flag` (e.g. "--attn-p").
double parse_real(const std::string& text, const char* flag);
int64_t parse_integer(const std::string& text, const char* flag);
// The shortest decimal text that reads back as exactly x ("1e-05", not "1.0000000000000001e-05").
std::string number_text(double x);

}  // namespace sinklab
