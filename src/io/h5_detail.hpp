// A thin layer over the HDF5 C API for io/h5.cpp (not for other callers): errors that name the file
// and the object, an owning handle, absolute object paths, chunked gzip datasets, attributes. Every
// function that fails throws sinklab::Error "<file>: <object>: <what> (<HDF5's innermost message>)".
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace sinklab::io::hdf5 {

// ---- errors ------------------------------------------------------------------------------------
// Switches HDF5's own error printing off (once per process).
void silence_hdf5();
// The innermost message of the current HDF5 error stack ("" when empty); clears the stack.
std::string hdf5_detail();
[[noreturn]] void fail(const std::string& file, const std::string& obj, const std::string& what);

// ---- an owning handle (H5Idec_ref when it goes) --------------------------------------------------
class Handle {
 public:
  Handle() = default;
  explicit Handle(hid_t id) : id_(id) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(std::exchange(o.id_, -1)) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, -1);
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t get() const { return id_; }
  bool valid() const { return id_ >= 0; }
  operator hid_t() const { return id_; }
  void reset() {
    if (id_ >= 0) H5Idec_ref(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
};

// id, or fail(file, obj, what) when it is negative.
Handle checked(hid_t id, const std::string& file, const std::string& obj, const std::string& what);
// fail(file, obj, what) when rc is negative.
void check(herr_t rc, const std::string& file, const std::string& obj, const std::string& what);

// ---- object paths --------------------------------------------------------------------------------
std::string normalize(const std::string& obj);                          // "a/b/" -> "/a/b"
std::string join(const std::string& group, const std::string& name);    // group + "/" + name
bool link_exists(hid_t file, const std::string& obj);                   // every component exists
std::string fmt_dims(const std::vector<int64_t>& d);                    // "[2,3]"

// ---- datasets ----------------------------------------------------------------------------------
// Chunk dims for a dataset of element size `esize`: the trailing dims whole, the first dim sized so a
// chunk holds about 64 KiB (at least one row).
std::vector<hsize_t> chunk_dims(const std::vector<int64_t>& dims, int64_t esize, bool extendable);
// Dataset creation properties: those chunks, shuffle, gzip level 4.
Handle gzip_chunked_dcpl(const std::string& file, const std::string& obj, const std::vector<hsize_t>& chunk);
// Link creation properties that create missing parent groups.
Handle lcpl_intermediate(const std::string& file, const std::string& obj);
std::vector<int64_t> dataset_dims(hid_t ds, const std::string& file, const std::string& obj);
bool is_extendable(hid_t ds);  // an unlimited first dimension
Handle open_dataset(hid_t file, const std::string& fname, const std::string& obj);
Handle open_object(hid_t file, const std::string& fname, const std::string& obj);
// An extendable chunked dataset [initial_rows, item...] of file type ftype.
Handle create_extendable(hid_t file, const std::string& fname, const std::string& obj, hid_t ftype,
                         const std::vector<int64_t>& item, int64_t initial_rows);

// The names H5Literate passes to list_cb (ctx = a ListCtx*).
struct ListCtx {
  std::vector<std::string> names;
};
herr_t list_cb(hid_t, const char* name, const H5L_info_t*, void* data);

// ---- attributes ----------------------------------------------------------------------------------
Handle open_attr_target(hid_t file, const std::string& fname, const std::string& obj);
// A scalar attribute (replaced when present).
void write_attr(hid_t file, const std::string& fname, const std::string& obj_in, const std::string& name,
                hid_t ftype, hid_t mtype, const void* value);
Handle open_attr(hid_t file, const std::string& fname, const std::string& obj_in, const std::string& name);
Handle utf8_vlen_string(const std::string& fname, const std::string& obj);  // the string attributes' type

// ---- files -----------------------------------------------------------------------------------------
void copy_file_or_fail(const std::string& from, const std::string& to);
void fsync_path(const std::string& path);

}  // namespace sinklab::io::hdf5
