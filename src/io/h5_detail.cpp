// The HDF5 C API as ResultsFile uses it (h5_detail.hpp).
#include "io/h5_detail.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

#include "core/error.hpp"

namespace sinklab::io::hdf5 {

// ---- HDF5 error handling ------------------------------------------------------------------------

void silence_hdf5() {
  static std::once_flag once;
  std::call_once(once, [] {
    H5open();
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  });
}

namespace {
herr_t innermost_walk(unsigned n, const H5E_error2_t* err, void* out) {
  if (n == 0 && err && err->desc) *static_cast<std::string*>(out) = err->desc;
  return 0;
}
}  // namespace

// The innermost message of the current HDF5 error stack ("" when empty).
std::string hdf5_detail() {
  std::string detail;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, innermost_walk, &detail);
  H5Eclear2(H5E_DEFAULT);
  return detail;
}

[[noreturn]] void fail(const std::string& file, const std::string& obj, const std::string& what) {
  std::string detail = hdf5_detail();
  std::string msg = file + ": " + (obj.empty() ? std::string() : obj + ": ") + what;
  if (!detail.empty()) msg += " (" + detail + ")";
  SL_FAIL("%s", msg.c_str());
}

Handle checked(hid_t id, const std::string& file, const std::string& obj, const std::string& what) {
  if (id < 0) fail(file, obj, what);
  return Handle(id);
}

void check(herr_t rc, const std::string& file, const std::string& obj, const std::string& what) {
  if (rc < 0) fail(file, obj, what);
}

// ---- path helpers --------------------------------------------------------------------------------

std::string normalize(const std::string& obj) {
  std::string p = obj.empty() || obj[0] != '/' ? "/" + obj : obj;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  return p;
}

std::string join(const std::string& group, const std::string& name) {
  std::string g = normalize(group);
  return g == "/" ? "/" + name : g + "/" + name;
}

bool link_exists(hid_t file, const std::string& obj) {
  std::string p = normalize(obj);
  if (p == "/") return true;
  size_t pos = 0;
  while (pos != std::string::npos) {
    pos = p.find('/', pos + 1);
    std::string prefix = p.substr(0, pos);
    htri_t e = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    if (e <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return false;
    }
  }
  return true;
}

namespace {
constexpr int kGzipLevel = 4;
constexpr int64_t kChunkBytes = 64 * 1024;
}  // namespace

// Chunk dims for a dataset of element size `esize`: the trailing dims whole, the first dim sized so a
// chunk holds about kChunkBytes (at least one row). Every chunk dim is >= 1.
std::vector<hsize_t> chunk_dims(const std::vector<int64_t>& dims, int64_t esize, bool extendable) {
  std::vector<hsize_t> c(dims.size());
  int64_t inner = esize;
  for (size_t d = 1; d < dims.size(); ++d) {
    c[d] = hsize_t(std::max<int64_t>(dims[d], 1));
    inner *= std::max<int64_t>(dims[d], 1);
  }
  int64_t rows = std::max<int64_t>(1, kChunkBytes / inner);
  if (!extendable) rows = std::min<int64_t>(rows, std::max<int64_t>(dims[0], 1));
  c[0] = hsize_t(rows);
  return c;
}

Handle gzip_chunked_dcpl(const std::string& file, const std::string& obj, const std::vector<hsize_t>& chunk) {
  Handle dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), file, obj, "cannot create property list");
  check(H5Pset_chunk(dcpl, int(chunk.size()), chunk.data()), file, obj, "cannot set chunking");
  check(H5Pset_shuffle(dcpl), file, obj, "cannot set shuffle filter");
  check(H5Pset_deflate(dcpl, kGzipLevel), file, obj, "cannot set gzip filter");
  return dcpl;
}

Handle lcpl_intermediate(const std::string& file, const std::string& obj) {
  Handle lcpl = checked(H5Pcreate(H5P_LINK_CREATE), file, obj, "cannot create property list");
  check(H5Pset_create_intermediate_group(lcpl, 1), file, obj, "cannot set property");
  return lcpl;
}

std::vector<int64_t> dataset_dims(hid_t ds, const std::string& file, const std::string& obj) {
  Handle space = checked(H5Dget_space(ds), file, obj, "cannot read dataspace");
  int nd = H5Sget_simple_extent_ndims(space);
  if (nd < 0) fail(file, obj, "cannot read rank");
  std::vector<hsize_t> d(static_cast<size_t>(nd));
  if (nd > 0 && H5Sget_simple_extent_dims(space, d.data(), nullptr) < 0) fail(file, obj, "cannot read dims");
  return std::vector<int64_t>(d.begin(), d.end());
}

bool is_extendable(hid_t ds) {
  Handle space(H5Dget_space(ds));
  if (!space.valid()) return false;
  int nd = H5Sget_simple_extent_ndims(space);
  if (nd < 1) return false;
  std::vector<hsize_t> d(static_cast<size_t>(nd)), m(static_cast<size_t>(nd));
  if (H5Sget_simple_extent_dims(space, d.data(), m.data()) < 0) return false;
  return m[0] == H5S_UNLIMITED;
}

herr_t list_cb(hid_t, const char* name, const H5L_info_t*, void* data) {
  static_cast<ListCtx*>(data)->names.emplace_back(name);
  return 0;
}

std::string fmt_dims(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) s.push_back(',');
    s.append(std::to_string(d[i]));
  }
  return s + "]";
}

// A plain read/write loop rather than std::filesystem::copy_file, whose error on a full disk reads
// "Input/output error": each failure names the file and the system's own cause (ENOSPC and all), and
// the partial copy is removed.
void copy_file_or_fail(const std::string& from, const std::string& to) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  SL_CHECK(in >= 0, "cannot read %s: %s", from.c_str(), std::strerror(errno));
  const int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out < 0) {
    const int err = errno;
    ::close(in);
    SL_FAIL("cannot create %s (a copy of %s): %s", to.c_str(), from.c_str(), std::strerror(err));
  }
  std::vector<char> buffer(size_t(1) << 20);
  std::string failure;
  while (failure.empty()) {
    const ssize_t n = ::read(in, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) failure = strfmt("cannot read %s: %s", from.c_str(), std::strerror(errno));
    if (n <= 0) break;
    for (ssize_t done = 0; done < n && failure.empty();) {
      const ssize_t w = ::write(out, buffer.data() + done, size_t(n - done));
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) failure = strfmt("cannot write %s (a copy of %s): %s", to.c_str(), from.c_str(), std::strerror(errno));
      else done += w;
    }
  }
  ::close(in);
  if (::close(out) != 0 && failure.empty())
    failure = strfmt("cannot write %s (a copy of %s): %s", to.c_str(), from.c_str(), std::strerror(errno));
  if (failure.empty()) return;
  ::unlink(to.c_str());
  SL_FAIL("%s", failure.c_str());
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  SL_CHECK(fd >= 0, "cannot open %s: %s", path.c_str(), std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  SL_CHECK(rc == 0, "fsync of %s failed: %s", path.c_str(), std::strerror(err));
}

// ---- the per-file operations (free functions over a file id) -----------------------------------

Handle open_dataset(hid_t file, const std::string& fname, const std::string& obj) {
  if (!link_exists(file, obj)) SL_FAIL("%s: %s: no such dataset", fname.c_str(), obj.c_str());
  return checked(H5Dopen2(file, obj.c_str(), H5P_DEFAULT), fname, obj, "cannot open dataset");
}

Handle open_object(hid_t file, const std::string& fname, const std::string& obj) {
  if (!link_exists(file, obj)) SL_FAIL("%s: %s: no such object", fname.c_str(), obj.c_str());
  return checked(H5Oopen(file, obj.c_str(), H5P_DEFAULT), fname, obj, "cannot open object");
}

// Creates an extendable chunked dataset [0, item...] of file type ftype.
Handle create_extendable(hid_t file, const std::string& fname, const std::string& obj, hid_t ftype,
                         const std::vector<int64_t>& item, int64_t initial_rows) {
  std::vector<int64_t> dims{initial_rows};
  dims.insert(dims.end(), item.begin(), item.end());
  std::vector<hsize_t> cur(dims.begin(), dims.end()), max(cur);
  max[0] = H5S_UNLIMITED;
  Handle space = checked(H5Screate_simple(int(cur.size()), cur.data(), max.data()), fname, obj,
                         "cannot create dataspace");
  Handle dcpl = gzip_chunked_dcpl(fname, obj, chunk_dims(dims, int64_t(H5Tget_size(ftype)), true));
  Handle lcpl = lcpl_intermediate(fname, obj);
  return checked(H5Dcreate2(file, obj.c_str(), ftype, space, lcpl, dcpl, H5P_DEFAULT), fname, obj,
                 "cannot create dataset");
}

Handle open_attr_target(hid_t file, const std::string& fname, const std::string& obj) {
  return open_object(file, fname, normalize(obj));
}

void write_attr(hid_t file, const std::string& fname, const std::string& obj_in, const std::string& name,
                hid_t ftype, hid_t mtype, const void* value) {
  std::string obj = normalize(obj_in);
  std::string what = obj + " attribute " + name;
  Handle target = open_attr_target(file, fname, obj);
  htri_t e = H5Aexists(target, name.c_str());
  if (e < 0) fail(fname, what, "cannot query attribute");
  if (e > 0) check(H5Adelete(target, name.c_str()), fname, what, "cannot replace attribute");
  Handle space = checked(H5Screate(H5S_SCALAR), fname, what, "cannot create dataspace");
  Handle attr = checked(H5Acreate2(target, name.c_str(), ftype, space, H5P_DEFAULT, H5P_DEFAULT), fname, what,
                        "cannot create attribute");
  check(H5Awrite(attr, mtype, value), fname, what, "cannot write attribute");
}

Handle open_attr(hid_t file, const std::string& fname, const std::string& obj_in, const std::string& name) {
  std::string obj = normalize(obj_in);
  Handle target = open_attr_target(file, fname, obj);
  htri_t e = H5Aexists(target, name.c_str());
  if (e <= 0) {
    H5Eclear2(H5E_DEFAULT);
    SL_FAIL("%s: %s: no attribute '%s'", fname.c_str(), obj.c_str(), name.c_str());
  }
  return checked(H5Aopen(target, name.c_str(), H5P_DEFAULT), fname, obj + " attribute " + name,
                 "cannot open attribute");
}

Handle utf8_vlen_string(const std::string& fname, const std::string& obj) {
  Handle t = checked(H5Tcopy(H5T_C_S1), fname, obj, "cannot create string type");
  check(H5Tset_size(t, H5T_VARIABLE), fname, obj, "cannot create string type");
  check(H5Tset_cset(t, H5T_CSET_UTF8), fname, obj, "cannot create string type");
  return t;
}

}  // namespace sinklab::io::hdf5
