// A bundle of results made on one rank and written into the HDF5 results file by another (the survey:
// workers measure, rank 0 writes): N-d arrays (f32, f64, i32) and attributes, named by paths relative
// to a group chosen at write time. serialize() gives the bytes that travel over MPI; deserialize() reads
// them back (same host byte order on every rank).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "io/h5.hpp"

namespace sinklab::io {

class ResultSet {
 public:
  using Data = std::variant<std::vector<double>, std::vector<float>, std::vector<int32_t>>;
  using Value = std::variant<std::string, double, int64_t>;
  struct ArrayEntry {
    std::string name;  // relative path of the dataset ("alpha", "qk/cos")
    std::vector<int64_t> dims;
    Data data;
  };
  struct AttrEntry {
    std::string object;  // relative path of the group or dataset ("" = the group itself)
    std::string name;
    Value value;
  };

  // The product of dims must equal the number of values (else sinklab::Error).
  void add_array(const std::string& name, std::vector<int64_t> dims, Data data);
  void set_attr(const std::string& object, const std::string& name, Value value);

  const std::vector<ArrayEntry>& arrays() const { return arrays_; }
  const std::vector<AttrEntry>& attrs() const { return attrs_; }
  const ArrayEntry* find_array(const std::string& name) const;
  const Value* find_attr(const std::string& object, const std::string& name) const;

  std::string serialize() const;
  // Reads one set from the start of `bytes`; *consumed (when given) receives its length, so sets can be
  // concatenated. Malformed bytes throw sinklab::Error.
  static ResultSet deserialize(std::string_view bytes, size_t* consumed = nullptr);

  // Creates `group` (and parents) and writes every array (replacing datasets of the same name) and then
  // every attribute.
  void write(ResultsFile& file, const std::string& group) const;

 private:
  std::vector<ArrayEntry> arrays_;
  std::vector<AttrEntry> attrs_;
};

}  // namespace sinklab::io
