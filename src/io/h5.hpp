// HDF5 results files: the one schema (docs/DESIGN.md, "HDF5 results") written by every binary.
//
//   /                  attrs sinklab_version, git_sha, created_utc, command_line, config (ini text)
//   /runs/<run>/train  1-D columns (step, tokens, loss, ...): append_row
//   /runs/<run>/eval   1-D columns + extendable N-d series such as alpha[step,L,H]: append_slab
//   /models/...        fixed N-d arrays (alpha[L,H,K], ...): write_array;  attributes: set_attr
//
// Every dataset is chunked and gzip-compressed. 1-D columns and slab series have an unlimited first
// dimension. Column types: a value given as an integer creates an int64 column, a floating-point value
// a float64 column (the type is fixed when the column is created; later values are converted).
// All columns of one group stay the same length: append_row pads columns a row does not name (NaN for
// float columns, -1 for integer columns), and a column first named when the group already has n rows is
// created with n padding rows.
//
// Durability ("results survive a kill at any moment"): a writable ResultsFile never touches `path`
// directly. It works on "<path>.tmp.<pid>" — a fresh file for create(), a copy of the committed file for
// open() (resume / append) — and commit() makes the work visible atomically:
//   H5Fflush + H5Fclose (strong close) -> fsync(temp) -> rename(temp, path) -> fsync(dir) -> copy path
//   to a new temp and reopen it.
// A kill -9 (or an exception, or destruction without commit()) therefore leaves `path` exactly as of
// the last commit (or absent if there was none); destroying a ResultsFile without commit() drops the
// uncommitted work and removes its temporary (a kill leaves the temporary behind as litter, never a
// torn `path`). Callers commit at checkpoint and eval boundaries and before exit; a resumed run reopens
// with open() and calls truncate_rows(group, n) to drop rows logged after its checkpoint.
// open_read() opens a committed file read-only in place (readers, tests, resume checks).
// Under SINKLAB_SCHEMA_CHECK=<src/io/results_schema.tsv> every write is checked against the declared schema
// (io/results_schema.hpp) and an undeclared one throws, naming the object.
// One writer per path at a time (the temporary is named by pid; in MPI jobs rank 0 writes, or each
// rank its own file). Committing copies the file once, which is cheap at results-file sizes.
//
// Every failure throws sinklab::Error naming the file and the object ("results.h5: /runs/a/train/loss:
// ..."). HDF5's own error-stack printing is switched off; its innermost message is appended instead.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace sinklab::io {

class ResultsSchema;  // io/results_schema.hpp

struct RootInfo {
  std::string sinklab_version;
  std::string git_sha;
  std::string created_utc;   // ISO 8601, e.g. "2025-01-31T12:00:00Z"; now_utc_iso() gives the current one
  std::string command_line;
  std::string config_text;   // the ini text; stored as the root attribute "config"
  std::string cpu_blas;      // the BLAS and kernel set that multiplied matrices (cpu_blas_summary())
};

// One named value of a row: integer values make int64 columns, floating-point values float64 columns.
struct Cell {
  std::string name;
  bool is_int = false;
  int64_t i = 0;
  double d = 0.0;
  Cell(std::string n, int v) : name(std::move(n)), is_int(true), i(v) {}
  Cell(std::string n, long v) : name(std::move(n)), is_int(true), i(v) {}
  Cell(std::string n, long long v) : name(std::move(n)), is_int(true), i(v) {}
  Cell(std::string n, unsigned v) : name(std::move(n)), is_int(true), i(int64_t(v)) {}
  Cell(std::string n, unsigned long v) : name(std::move(n)), is_int(true), i(int64_t(v)) {}
  Cell(std::string n, unsigned long long v) : name(std::move(n)), is_int(true), i(int64_t(v)) {}
  Cell(std::string n, float v) : name(std::move(n)), d(v) {}
  Cell(std::string n, double v) : name(std::move(n)), d(v) {}
};

// An N-d array read back as double (any stored numeric type is converted).
struct Array {
  std::vector<int64_t> dims;
  std::vector<double> data;  // row-major
};

std::string now_utc_iso();

class ResultsFile {
 public:
  // A new results file (replaces `path` at the first commit) with the root attributes of RootInfo.
  static ResultsFile create(const std::string& path, const RootInfo& info);
  // An existing results file opened for appending (resume): works on a copy, see above.
  static ResultsFile open(const std::string& path);
  // Opens `path` for appending when it exists, creates it (with info) otherwise.
  static ResultsFile open_or_create(const std::string& path, const RootInfo& info);
  // A committed file opened read-only in place; every write throws.
  static ResultsFile open_read(const std::string& path);

  ResultsFile(ResultsFile&& o) noexcept;
  ResultsFile& operator=(ResultsFile&& o) noexcept;
  ResultsFile(const ResultsFile&) = delete;
  ResultsFile& operator=(const ResultsFile&) = delete;
  // Without commit(): closes and removes the temporary; `path` keeps its last committed state.
  ~ResultsFile();

  const std::string& path() const { return path_; }
  bool writable() const { return writable_; }

  // Atomic publication of everything written so far (see the header comment). The file stays open.
  void commit();
  // Drops the uncommitted work and closes (what the destructor does). Further calls throw.
  void close();

  // True when every component of the absolute object path exists ("/" always exists).
  bool exists(const std::string& obj) const;
  // Creates a group and its missing parents; no-op when it exists.
  void create_group(const std::string& group);

  // ---- 1-D row tables (train/eval logs) --------------------------------------------------------
  void append_row(const std::string& group, std::initializer_list<Cell> row);
  void append_row(const std::string& group, const std::vector<Cell>& row);
  // Number of rows of a group: the longest first dimension of its extendable datasets (0 if none).
  int64_t rows(const std::string& group) const;
  // Shrinks every extendable dataset of the group (columns and slab series) to at most n rows.
  void truncate_rows(const std::string& group, int64_t n);

  // ---- N-d arrays --------------------------------------------------------------------------------
  // A fixed-shape dataset (replaced when it exists).
  void write_array(const std::string& obj, const std::vector<int64_t>& dims, const float* data);
  void write_array(const std::string& obj, const std::vector<int64_t>& dims, const double* data);
  void write_array(const std::string& obj, const std::vector<int64_t>& dims, const int32_t* data);
  // An extendable series [n, item_dims...]: appends `count` items (count * prod(item_dims) values).
  // Created on first use; item_dims must match afterwards.
  void append_slab(const std::string& obj, const std::vector<int64_t>& item_dims, const float* data,
                   int64_t count = 1);
  void append_slab(const std::string& obj, const std::vector<int64_t>& item_dims, const double* data,
                   int64_t count = 1);
  void append_slab(const std::string& obj, const std::vector<int64_t>& item_dims, const int32_t* data,
                   int64_t count = 1);

  // ---- attributes on any group or dataset (replaced when present) ---------------------------------
  void set_attr(const std::string& obj, const std::string& name, const std::string& value);
  void set_attr(const std::string& obj, const std::string& name, const char* value) {
    set_attr(obj, name, std::string(value));
  }
  void set_attr(const std::string& obj, const std::string& name, double value);
  void set_attr(const std::string& obj, const std::string& name, int64_t value);
  void set_attr(const std::string& obj, const std::string& name, int value) { set_attr(obj, name, int64_t(value)); }
  bool has_attr(const std::string& obj, const std::string& name) const;
  std::string attr_string(const std::string& obj, const std::string& name) const;
  double attr_double(const std::string& obj, const std::string& name) const;
  int64_t attr_int(const std::string& obj, const std::string& name) const;

  // ---- reading back --------------------------------------------------------------------------------
  std::vector<double> read_column(const std::string& obj) const;  // a 1-D dataset
  std::vector<int64_t> read_column_int(const std::string& obj) const;
  Array read_array(const std::string& obj) const;                 // any rank
  // Rows [first, first + n) along the first dimension of any dataset, converted to int32 (token and
  // mask files that are too large to read whole).
  void read_rows(const std::string& obj, int64_t first, int64_t n, int32_t* out) const;
  std::vector<int64_t> dims(const std::string& obj) const;
  // Names of the links directly under a group, sorted.
  std::vector<std::string> list(const std::string& group) const;

 private:
  ResultsFile() = default;
  void open_temp();
  void require_open(const char* what) const;
  void require_writable(const char* what) const;

  std::string path_, temp_;
  int64_t file_ = -1;  // hid_t
  bool writable_ = false;
  const ResultsSchema* schema_ = nullptr;  // SINKLAB_SCHEMA_CHECK's, for writable files (io/results_schema.hpp)
};

}  // namespace sinklab::io
