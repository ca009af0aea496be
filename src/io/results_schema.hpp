// The declared HDF5 results schema (src/io/results_schema.tsv; docs/DESIGN.md, "HDF5 results"): every group,
// dataset and attribute a binary may write into a results file, with its dtype and shape. analysis/results.py
// checks its reads against the same file (analysis/results_schema.py).
//
// The check is off unless SINKLAB_SCHEMA_CHECK names the schema file (the tests set it): then every write of
// a writable ResultsFile (create_group, append_row's columns, append_slab, write_array, set_attr) must match a
// declared line of its kind, dtype and rank (and every numeric dimension), else the write throws
// sinklab::Error naming the file, the object and what was written. Off, a write costs one null-pointer test.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace sinklab::io {

class ResultsSchema {
 public:
  enum class Kind { group, attr, column, series, array };

  struct Item {
    Kind kind = Kind::group;
    std::vector<std::string> path;  // components; "{name}" matches any one component
    std::string attr;               // attr lines: the attribute's name
    std::string dtype;              // "-" for groups and read-only fallbacks
    std::vector<int64_t> dims;      // -1 for a symbol; empty for groups and attributes
    std::string writer, reader;     // "none" for a read-only fallback of results.py
    int line = 0;
  };

  // Parses the schema's text (`source` names it in errors); malformed lines throw.
  static ResultsSchema parse(const std::string& text, const std::string& source);
  static ResultsSchema load(const std::string& path);
  // The schema named by SINKLAB_SCHEMA_CHECK, loaded on first use; nullptr when the variable is unset or empty.
  static const ResultsSchema* from_env();

  const std::vector<Item>& items() const { return items_; }

  // Each throws sinklab::Error "<file>: undeclared write ..." unless a declared item matches.
  // dtype: "f32", "f64", "i32" (datasets), "i64", "f64" (columns), "str", "i64", "f64" (attributes).
  void check_group(const std::string& file, const std::string& obj) const;
  void check_attr(const std::string& file, const std::string& obj, const std::string& name,
                  const std::string& dtype) const;
  void check_dataset(const std::string& file, Kind kind, const std::string& obj, const std::string& dtype,
                     const std::vector<int64_t>& dims) const;

 private:
  void check(const std::string& file, Kind kind, const std::string& obj, const std::string& attr,
             const std::string& dtype, const std::vector<int64_t>& dims) const;
  std::string source_;
  std::vector<Item> items_;
};

}  // namespace sinklab::io
