// ResultsFile (h5.hpp) over the HDF5 C API (through io/h5_detail.hpp).
#include "io/h5.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <limits>
#include <utility>

#include "core/error.hpp"
#include "io/files.hpp"
#include "io/h5_detail.hpp"
#include "io/results_schema.hpp"

namespace sinklab::io {

using namespace hdf5;

namespace {

template <class T> hid_t mem_type();
template <> hid_t mem_type<float>() { return H5T_NATIVE_FLOAT; }
template <> hid_t mem_type<double>() { return H5T_NATIVE_DOUBLE; }
template <> hid_t mem_type<int32_t>() { return H5T_NATIVE_INT32; }
template <> hid_t mem_type<int64_t>() { return H5T_NATIVE_INT64; }
template <class T> hid_t file_type();
template <> hid_t file_type<float>() { return H5T_IEEE_F32LE; }
template <> hid_t file_type<double>() { return H5T_IEEE_F64LE; }
template <> hid_t file_type<int32_t>() { return H5T_STD_I32LE; }
// The dtype names of the results schema (io/results_schema.hpp).
template <class T> const char* schema_dtype();
template <> const char* schema_dtype<float>() { return "f32"; }
template <> const char* schema_dtype<double>() { return "f64"; }
template <> const char* schema_dtype<int32_t>() { return "i32"; }

// append_slab's dims as the schema sees them: [count, item...].
std::vector<int64_t> series_dims(const std::vector<int64_t>& item, int64_t count) {
  std::vector<int64_t> d{count};
  d.insert(d.end(), item.begin(), item.end());
  return d;
}

// Writes `count` rows at the end of an extendable dataset whose item shape is item.
template <class T>
void append_rows(hid_t ds, const std::string& fname, const std::string& obj, const std::vector<int64_t>& item,
                 const T* data, int64_t count) {
  std::vector<int64_t> d = dataset_dims(ds, fname, obj);
  if (d.size() != item.size() + 1 || !std::equal(item.begin(), item.end(), d.begin() + 1))
    SL_FAIL("%s: %s: appending items of shape %s to a dataset of shape %s", fname.c_str(), obj.c_str(),
            fmt_dims(item).c_str(), fmt_dims(d).c_str());
  if (count <= 0) return;
  std::vector<hsize_t> newdims(d.begin(), d.end());
  newdims[0] += hsize_t(count);
  check(H5Dset_extent(ds, newdims.data()), fname, obj, "cannot extend dataset");
  Handle fspace = checked(H5Dget_space(ds), fname, obj, "cannot read dataspace");
  std::vector<hsize_t> start(newdims.size(), 0), cnt(newdims);
  start[0] = hsize_t(d[0]);
  cnt[0] = hsize_t(count);
  check(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr), fname, obj,
        "cannot select rows");
  Handle mspace = checked(H5Screate_simple(int(cnt.size()), cnt.data(), nullptr), fname, obj,
                          "cannot create dataspace");
  check(H5Dwrite(ds, mem_type<T>(), mspace, fspace, H5P_DEFAULT, data), fname, obj, "cannot write rows");
}

template <class T>
void write_array_impl(hid_t file, const std::string& fname, const std::string& obj_in,
                      const std::vector<int64_t>& dims, const T* data, const ResultsSchema* schema) {
  std::string obj = normalize(obj_in);
  if (schema) schema->check_dataset(fname, ResultsSchema::Kind::array, obj, schema_dtype<T>(), dims);
  for (int64_t d : dims)
    if (d < 0) SL_FAIL("%s: %s: negative dimension in %s", fname.c_str(), obj.c_str(), fmt_dims(dims).c_str());
  if (dims.empty()) SL_FAIL("%s: %s: write_array needs at least one dimension", fname.c_str(), obj.c_str());
  if (link_exists(file, obj)) check(H5Ldelete(file, obj.c_str(), H5P_DEFAULT), fname, obj, "cannot replace");
  std::vector<hsize_t> cur(dims.begin(), dims.end());
  Handle space = checked(H5Screate_simple(int(cur.size()), cur.data(), nullptr), fname, obj,
                         "cannot create dataspace");
  Handle dcpl = gzip_chunked_dcpl(fname, obj, chunk_dims(dims, sizeof(T), false));
  Handle lcpl = lcpl_intermediate(fname, obj);
  Handle ds = checked(H5Dcreate2(file, obj.c_str(), file_type<T>(), space, lcpl, dcpl, H5P_DEFAULT), fname, obj,
                      "cannot create dataset");
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  if (n > 0) check(H5Dwrite(ds, mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, data), fname, obj, "cannot write");
}

template <class T>
void append_slab_impl(hid_t file, const std::string& fname, const std::string& obj_in,
                      const std::vector<int64_t>& item, const T* data, int64_t count, const ResultsSchema* schema) {
  std::string obj = normalize(obj_in);
  if (schema) schema->check_dataset(fname, ResultsSchema::Kind::series, obj, schema_dtype<T>(), series_dims(item, count));
  for (int64_t d : item)
    if (d <= 0) SL_FAIL("%s: %s: item dims %s must be positive", fname.c_str(), obj.c_str(), fmt_dims(item).c_str());
  Handle ds;
  if (link_exists(file, obj)) {
    ds = open_dataset(file, fname, obj);
    if (!is_extendable(ds)) SL_FAIL("%s: %s: not an extendable dataset", fname.c_str(), obj.c_str());
  } else {
    ds = create_extendable(file, fname, obj, file_type<T>(), item, 0);
  }
  append_rows(ds, fname, obj, item, data, count);
}

template <class T>
std::vector<T> read_all(hid_t file, const std::string& fname, const std::string& obj_in, std::vector<int64_t>* dims_out) {
  std::string obj = normalize(obj_in);
  Handle ds = open_dataset(file, fname, obj);
  std::vector<int64_t> dims = dataset_dims(ds, fname, obj);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<T> out(size_t(std::max<int64_t>(n, 0)));
  if (n > 0) check(H5Dread(ds, mem_type<T>(), H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), fname, obj, "cannot read");
  if (dims_out) *dims_out = dims;
  return out;
}

// A numeric attribute converted to T by HDF5 (else "... cannot read attribute as <what>").
template <class T>
T read_number_attr(hid_t file, const std::string& fname, const std::string& obj, const std::string& name,
                   const char* what) {
  Handle attr = open_attr(file, fname, obj, name);
  T v = 0;
  check(H5Aread(attr, mem_type<T>(), &v), fname, normalize(obj) + " attribute " + name,
        std::string("cannot read attribute as ") + what);
  return v;
}

// A 1-D dataset read whole (else "<file>: <obj> is not 1-D").
template <class T>
std::vector<T> read_1d(hid_t file, const std::string& fname, const std::string& obj) {
  std::vector<int64_t> d;
  std::vector<T> v = read_all<T>(file, fname, obj, &d);
  SL_CHECK(d.size() == 1, "%s: %s is not 1-D (shape %s)", fname.c_str(), normalize(obj).c_str(), fmt_dims(d).c_str());
  return v;
}

}  // namespace

// ---- ResultsFile ----------------------------------------------------------------------------------

std::string now_utc_iso() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

ResultsFile::ResultsFile(ResultsFile&& o) noexcept
    : path_(std::move(o.path_)), temp_(std::move(o.temp_)), file_(std::exchange(o.file_, -1)),
      writable_(std::exchange(o.writable_, false)), schema_(std::exchange(o.schema_, nullptr)) {}

ResultsFile& ResultsFile::operator=(ResultsFile&& o) noexcept {
  if (this != &o) {
    try {
      close();
    } catch (...) {
    }
    path_ = std::move(o.path_);
    temp_ = std::move(o.temp_);
    file_ = std::exchange(o.file_, -1);
    writable_ = std::exchange(o.writable_, false);
    schema_ = std::exchange(o.schema_, nullptr);
  }
  return *this;
}

ResultsFile::~ResultsFile() {
  try {
    close();
  } catch (...) {
  }
}

void ResultsFile::close() {
  if (file_ >= 0) {
    H5Fclose(hid_t(file_));
    file_ = -1;
    H5Eclear2(H5E_DEFAULT);
  }
  if (writable_ && !temp_.empty()) std::remove(temp_.c_str());
  writable_ = false;
}

void ResultsFile::require_open(const char* what) const {
  SL_CHECK(file_ >= 0, "%s: %s on a closed results file", path_.c_str(), what);
}
void ResultsFile::require_writable(const char* what) const {
  require_open(what);
  SL_CHECK(writable_, "%s: %s on a file opened read-only", path_.c_str(), what);
}

// Opens temp_ read-write with strong close semantics (H5Fclose closes every object of the file).
void ResultsFile::open_temp() {
  Handle fapl = checked(H5Pcreate(H5P_FILE_ACCESS), temp_, "", "cannot create property list");
  check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), temp_, "", "cannot set property");
  hid_t f = H5Fopen(temp_.c_str(), H5F_ACC_RDWR, fapl);
  if (f < 0) fail(path_, "", "cannot open working copy " + temp_);
  file_ = f;
}

ResultsFile ResultsFile::create(const std::string& path, const RootInfo& info) {
  silence_hdf5();
  ResultsFile r;
  r.path_ = path;
  r.temp_ = working_copy_path(path);
  Handle fapl = checked(H5Pcreate(H5P_FILE_ACCESS), path, "", "cannot create property list");
  check(H5Pset_fclose_degree(fapl, H5F_CLOSE_STRONG), path, "", "cannot set property");
  hid_t f = H5Fcreate(r.temp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
  if (f < 0) {
    std::string detail = hdf5_detail();
    SL_FAIL("cannot create results file %s (working copy %s)%s", path.c_str(), r.temp_.c_str(),
            detail.empty() ? "" : (" (" + detail + ")").c_str());
  }
  r.file_ = f;
  r.writable_ = true;
  r.schema_ = ResultsSchema::from_env();
  r.set_attr("/", "sinklab_version", info.sinklab_version);
  r.set_attr("/", "git_sha", info.git_sha);
  r.set_attr("/", "created_utc", info.created_utc.empty() ? now_utc_iso() : info.created_utc);
  r.set_attr("/", "command_line", info.command_line);
  r.set_attr("/", "config", info.config_text);
  r.set_attr("/", "cpu_blas", info.cpu_blas);
  return r;
}

ResultsFile ResultsFile::open(const std::string& path) {
  silence_hdf5();
  std::error_code ec;
  SL_CHECK(std::filesystem::is_regular_file(path, ec), "cannot open results file %s: no such file", path.c_str());
  htri_t is = H5Fis_hdf5(path.c_str());
  if (is <= 0) {
    H5Eclear2(H5E_DEFAULT);
    SL_FAIL("cannot open results file %s: not an HDF5 file", path.c_str());
  }
  ResultsFile r;
  r.path_ = path;
  r.temp_ = working_copy_path(path);
  copy_file_or_fail(path, r.temp_);
  r.writable_ = true;  // from here on, destruction removes the temporary
  r.schema_ = ResultsSchema::from_env();
  r.open_temp();
  return r;
}

ResultsFile ResultsFile::open_or_create(const std::string& path, const RootInfo& info) {
  std::error_code ec;
  return std::filesystem::exists(path, ec) ? open(path) : create(path, info);
}

ResultsFile ResultsFile::open_read(const std::string& path) {
  silence_hdf5();
  std::error_code ec;
  SL_CHECK(std::filesystem::is_regular_file(path, ec), "cannot open results file %s: no such file", path.c_str());
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) fail(path, "", "cannot open results file (not HDF5?)");
  ResultsFile r;
  r.path_ = path;
  r.file_ = f;
  r.writable_ = false;
  return r;
}

void ResultsFile::commit() {
  require_writable("commit");
  check(H5Fflush(hid_t(file_), H5F_SCOPE_GLOBAL), path_, "", "cannot flush");
  herr_t rc = H5Fclose(hid_t(file_));
  file_ = -1;
  if (rc < 0) fail(path_, "", "cannot close working copy " + temp_);
  fsync_path(temp_);
  if (std::rename(temp_.c_str(), path_.c_str()) != 0)
    SL_FAIL("cannot rename %s to %s: %s", temp_.c_str(), path_.c_str(), std::strerror(errno));
  sync_parent_dir(path_);
  // Continue on a fresh working copy of what was just committed.
  copy_file_or_fail(path_, temp_);
  open_temp();
}

bool ResultsFile::exists(const std::string& obj) const {
  require_open("exists");
  return link_exists(hid_t(file_), obj);
}

void ResultsFile::create_group(const std::string& group_in) {
  require_writable("create_group");
  std::string group = normalize(group_in);
  if (schema_) schema_->check_group(path_, group);
  if (link_exists(hid_t(file_), group)) {
    Handle o = open_object(hid_t(file_), path_, group);
    if (H5Iget_type(o) != H5I_GROUP) SL_FAIL("%s: %s exists and is not a group", path_.c_str(), group.c_str());
    return;
  }
  Handle lcpl = lcpl_intermediate(path_, group);
  checked(H5Gcreate2(hid_t(file_), group.c_str(), lcpl, H5P_DEFAULT, H5P_DEFAULT), path_, group,
          "cannot create group");
}

void ResultsFile::append_row(const std::string& group, std::initializer_list<Cell> row) {
  append_row(group, std::vector<Cell>(row));
}

void ResultsFile::append_row(const std::string& group_in, const std::vector<Cell>& row) {
  require_writable("append_row");
  const std::string group = normalize(group_in);
  for (size_t a = 0; a < row.size(); ++a) {
    SL_CHECK(!row[a].name.empty() && row[a].name.find('/') == std::string::npos,
             "%s: %s: bad column name '%s'", path_.c_str(), group.c_str(), row[a].name.c_str());
    for (size_t b = a + 1; b < row.size(); ++b)
      SL_CHECK(row[a].name != row[b].name, "%s: %s: column '%s' given twice in one row", path_.c_str(),
               group.c_str(), row[a].name.c_str());
    if (schema_)
      schema_->check_dataset(path_, ResultsSchema::Kind::column, join(group, row[a].name), row[a].is_int ? "i64" : "f64",
                             {1});
  }
  create_group(group);
  const hid_t f = hid_t(file_);
  // The group's 1-D extendable columns and the current row count.
  std::vector<std::string> columns;
  int64_t n = 0;
  for (const std::string& name : list(group)) {
    std::string obj = join(group, name);
    Handle o = open_object(f, path_, obj);
    if (H5Iget_type(o) != H5I_DATASET || !is_extendable(o)) continue;
    std::vector<int64_t> d = dataset_dims(o, path_, obj);
    if (d.size() != 1) continue;
    columns.push_back(name);
    n = std::max(n, d[0]);
  }
  for (const Cell& c : row) {
    if (std::find(columns.begin(), columns.end(), c.name) != columns.end()) continue;
    std::string obj = join(group, c.name);
    if (link_exists(f, obj))
      SL_FAIL("%s: %s exists and is not a 1-D extendable column", path_.c_str(), obj.c_str());
    Handle ds = create_extendable(f, path_, obj, c.is_int ? H5T_STD_I64LE : H5T_IEEE_F64LE, {}, 0);
    if (n > 0) {  // pad the new column to the group's length
      if (c.is_int) {
        std::vector<int64_t> pad(size_t(n), -1);
        append_rows(ds, path_, obj, {}, pad.data(), n);
      } else {
        std::vector<double> pad(size_t(n), std::numeric_limits<double>::quiet_NaN());
        append_rows(ds, path_, obj, {}, pad.data(), n);
      }
    }
    columns.push_back(c.name);
  }
  for (const std::string& name : columns) {
    std::string obj = join(group, name);
    Handle ds = open_dataset(f, path_, obj);
    const Cell* cell = nullptr;
    for (const Cell& c : row)
      if (c.name == name) cell = &c;
    int64_t len = dataset_dims(ds, path_, obj)[0];
    // Pad a column that lags behind (it was missing from earlier rows), then write this row's value.
    Handle ftype = checked(H5Dget_type(ds), path_, obj, "cannot read type");
    bool int_col = H5Tget_class(ftype) == H5T_INTEGER;
    int64_t count = n + 1 - len;
    if (int_col) {
      std::vector<int64_t> v(size_t(count), -1);
      if (cell) v.back() = cell->is_int ? cell->i : int64_t(std::llround(cell->d));
      append_rows(ds, path_, obj, {}, v.data(), count);
    } else {
      std::vector<double> v(size_t(count), std::numeric_limits<double>::quiet_NaN());
      if (cell) v.back() = cell->is_int ? double(cell->i) : cell->d;
      append_rows(ds, path_, obj, {}, v.data(), count);
    }
  }
}

int64_t ResultsFile::rows(const std::string& group_in) const {
  require_open("rows");
  const std::string group = normalize(group_in);
  if (!link_exists(hid_t(file_), group)) return 0;
  int64_t n = 0;
  for (const std::string& name : list(group)) {
    std::string obj = join(group, name);
    Handle o = open_object(hid_t(file_), path_, obj);
    if (H5Iget_type(o) != H5I_DATASET || !is_extendable(o)) continue;
    n = std::max(n, dataset_dims(o, path_, obj)[0]);
  }
  return n;
}

void ResultsFile::truncate_rows(const std::string& group_in, int64_t n) {
  require_writable("truncate_rows");
  const std::string group = normalize(group_in);
  SL_CHECK(n >= 0, "%s: %s: truncate_rows to %lld rows", path_.c_str(), group.c_str(), (long long)n);
  if (!link_exists(hid_t(file_), group)) return;
  for (const std::string& name : list(group)) {
    std::string obj = join(group, name);
    Handle o = open_object(hid_t(file_), path_, obj);
    if (H5Iget_type(o) != H5I_DATASET || !is_extendable(o)) continue;
    std::vector<int64_t> d = dataset_dims(o, path_, obj);
    if (d[0] <= n) continue;
    std::vector<hsize_t> nd(d.begin(), d.end());
    nd[0] = hsize_t(n);
    check(H5Dset_extent(o, nd.data()), path_, obj, "cannot truncate");
  }
}

void ResultsFile::write_array(const std::string& obj, const std::vector<int64_t>& dims, const float* data) {
  require_writable("write_array");
  write_array_impl(hid_t(file_), path_, obj, dims, data, schema_);
}
void ResultsFile::write_array(const std::string& obj, const std::vector<int64_t>& dims, const double* data) {
  require_writable("write_array");
  write_array_impl(hid_t(file_), path_, obj, dims, data, schema_);
}
void ResultsFile::write_array(const std::string& obj, const std::vector<int64_t>& dims, const int32_t* data) {
  require_writable("write_array");
  write_array_impl(hid_t(file_), path_, obj, dims, data, schema_);
}

void ResultsFile::append_slab(const std::string& obj, const std::vector<int64_t>& item, const float* data,
                              int64_t count) {
  require_writable("append_slab");
  append_slab_impl(hid_t(file_), path_, obj, item, data, count, schema_);
}
void ResultsFile::append_slab(const std::string& obj, const std::vector<int64_t>& item, const double* data,
                              int64_t count) {
  require_writable("append_slab");
  append_slab_impl(hid_t(file_), path_, obj, item, data, count, schema_);
}
void ResultsFile::append_slab(const std::string& obj, const std::vector<int64_t>& item, const int32_t* data,
                              int64_t count) {
  require_writable("append_slab");
  append_slab_impl(hid_t(file_), path_, obj, item, data, count, schema_);
}

void ResultsFile::set_attr(const std::string& obj, const std::string& name, const std::string& value) {
  require_writable("set_attr");
  if (schema_) schema_->check_attr(path_, normalize(obj), name, "str");
  Handle t = utf8_vlen_string(path_, obj);
  const char* p = value.c_str();
  write_attr(hid_t(file_), path_, obj, name, t, t, &p);
}
void ResultsFile::set_attr(const std::string& obj, const std::string& name, double value) {
  require_writable("set_attr");
  if (schema_) schema_->check_attr(path_, normalize(obj), name, "f64");
  write_attr(hid_t(file_), path_, obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}
void ResultsFile::set_attr(const std::string& obj, const std::string& name, int64_t value) {
  require_writable("set_attr");
  if (schema_) schema_->check_attr(path_, normalize(obj), name, "i64");
  write_attr(hid_t(file_), path_, obj, name, H5T_STD_I64LE, H5T_NATIVE_INT64, &value);
}

bool ResultsFile::has_attr(const std::string& obj, const std::string& name) const {
  require_open("has_attr");
  if (!link_exists(hid_t(file_), obj)) return false;
  Handle target = open_attr_target(hid_t(file_), path_, obj);
  htri_t e = H5Aexists(target, name.c_str());
  H5Eclear2(H5E_DEFAULT);
  return e > 0;
}

std::string ResultsFile::attr_string(const std::string& obj, const std::string& name) const {
  require_open("attr_string");
  const std::string what = normalize(obj) + " attribute " + name;
  Handle attr = open_attr(hid_t(file_), path_, obj, name);
  Handle ftype = checked(H5Aget_type(attr), path_, what, "cannot read type");
  if (H5Tget_class(ftype) != H5T_STRING) SL_FAIL("%s: %s is not a string", path_.c_str(), what.c_str());
  if (H5Tis_variable_str(ftype) > 0) {
    Handle mtype = utf8_vlen_string(path_, what);
    char* p = nullptr;
    check(H5Aread(attr, mtype, &p), path_, what, "cannot read attribute");
    std::string out = p ? p : "";
    if (p) H5free_memory(p);
    return out;
  }
  size_t size = H5Tget_size(ftype);
  std::string buf(size, '\0');
  check(H5Aread(attr, ftype, buf.data()), path_, what, "cannot read attribute");
  return std::string(buf.c_str());
}

double ResultsFile::attr_double(const std::string& obj, const std::string& name) const {
  require_open("attr_double");
  return read_number_attr<double>(hid_t(file_), path_, obj, name, "a number");
}

int64_t ResultsFile::attr_int(const std::string& obj, const std::string& name) const {
  require_open("attr_int");
  return read_number_attr<int64_t>(hid_t(file_), path_, obj, name, "an integer");
}

std::vector<double> ResultsFile::read_column(const std::string& obj) const {
  require_open("read_column");
  return read_1d<double>(hid_t(file_), path_, obj);
}

std::vector<int64_t> ResultsFile::read_column_int(const std::string& obj) const {
  require_open("read_column_int");
  return read_1d<int64_t>(hid_t(file_), path_, obj);
}

Array ResultsFile::read_array(const std::string& obj) const {
  require_open("read_array");
  Array a;
  a.data = read_all<double>(hid_t(file_), path_, obj, &a.dims);
  return a;
}

void ResultsFile::read_rows(const std::string& obj_in, int64_t first, int64_t n, int32_t* out) const {
  require_open("read_rows");
  const std::string obj = normalize(obj_in);
  Handle ds = open_dataset(hid_t(file_), path_, obj);
  const std::vector<int64_t> d = dataset_dims(ds, path_, obj);
  if (d.empty() || first < 0 || n < 0 || first + n > d[0])
    SL_FAIL("%s: %s: rows [%lld, %lld) outside a dataset of shape %s", path_.c_str(), obj.c_str(), (long long)first,
            (long long)(first + n), fmt_dims(d).c_str());
  if (n == 0) return;
  Handle fspace = checked(H5Dget_space(ds), path_, obj, "cannot read dataspace");
  std::vector<hsize_t> start(d.size(), 0), cnt(d.begin(), d.end());
  start[0] = hsize_t(first);
  cnt[0] = hsize_t(n);
  check(H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start.data(), nullptr, cnt.data(), nullptr), path_, obj,
        "cannot select rows");
  Handle mspace = checked(H5Screate_simple(int(cnt.size()), cnt.data(), nullptr), path_, obj, "cannot create dataspace");
  check(H5Dread(ds, mem_type<int32_t>(), mspace, fspace, H5P_DEFAULT, out), path_, obj, "cannot read rows");
}

std::vector<int64_t> ResultsFile::dims(const std::string& obj) const {
  require_open("dims");
  Handle ds = open_dataset(hid_t(file_), path_, normalize(obj));
  return dataset_dims(ds, path_, normalize(obj));
}

std::vector<std::string> ResultsFile::list(const std::string& group_in) const {
  require_open("list");
  const std::string group = normalize(group_in);
  Handle g = open_object(hid_t(file_), path_, group);
  if (H5Iget_type(g) != H5I_GROUP) SL_FAIL("%s: %s is not a group", path_.c_str(), group.c_str());
  ListCtx ctx;
  check(H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, nullptr, list_cb, &ctx), path_, group, "cannot list group");
  std::sort(ctx.names.begin(), ctx.names.end());
  return ctx.names;
}

}  // namespace sinklab::io
