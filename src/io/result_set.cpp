#include "io/result_set.hpp"

#include <cstring>

#include "core/error.hpp"

namespace sinklab::io {
namespace {

constexpr char kMagic[8] = {'S', 'L', 'R', 'E', 'S', 'U', 'L', '1'};

// Bytes in host order: u64 lengths, then raw values.
struct Writer {
  std::string out;
  void u64(uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
  void bytes(const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }
  void str(const std::string& s) {
    u64(s.size());
    out += s;
  }
};

struct Reader {
  std::string_view in;
  size_t pos = 0;
  void need(uint64_t n) const {
    SL_CHECK(n <= in.size() - pos, "result set: truncated (%zu bytes, %llu more needed at %zu)", in.size(),
             (unsigned long long)n, pos);
  }
  uint64_t u64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, in.data() + pos, 8);
    pos += 8;
    return v;
  }
  void bytes(void* p, size_t n) {
    need(n);
    std::memcpy(p, in.data() + pos, n);
    pos += n;
  }
  std::string str() {
    const uint64_t n = u64();
    need(n);
    std::string s(in.substr(pos, size_t(n)));
    pos += size_t(n);
    return s;
  }
};

size_t size_of(const ResultSet::Data& d) {
  return std::visit([](const auto& v) { return v.size(); }, d);
}

}  // namespace

void ResultSet::add_array(const std::string& name, std::vector<int64_t> dims, Data data) {
  int64_t n = 1;
  for (int64_t d : dims) {
    SL_CHECK(d >= 0, "result set: %s has a negative dimension", name.c_str());
    n *= d;
  }
  SL_CHECK(size_t(n) == size_of(data), "result set: %s has %zu values for %lld elements", name.c_str(), size_of(data),
           (long long)n);
  arrays_.push_back({name, std::move(dims), std::move(data)});
}

void ResultSet::set_attr(const std::string& object, const std::string& name, Value value) {
  for (AttrEntry& a : attrs_)
    if (a.object == object && a.name == name) {
      a.value = std::move(value);
      return;
    }
  attrs_.push_back({object, name, std::move(value)});
}

const ResultSet::ArrayEntry* ResultSet::find_array(const std::string& name) const {
  for (const ArrayEntry& a : arrays_)
    if (a.name == name) return &a;
  return nullptr;
}

const ResultSet::Value* ResultSet::find_attr(const std::string& object, const std::string& name) const {
  for (const AttrEntry& a : attrs_)
    if (a.object == object && a.name == name) return &a.value;
  return nullptr;
}

std::string ResultSet::serialize() const {
  Writer w;
  w.bytes(kMagic, sizeof kMagic);
  w.u64(arrays_.size());
  for (const ArrayEntry& a : arrays_) {
    w.str(a.name);
    w.u64(a.data.index());
    w.u64(a.dims.size());
    for (int64_t d : a.dims) w.u64(uint64_t(d));
    std::visit(
        [&](const auto& v) {
          w.u64(v.size());
          w.bytes(v.data(), v.size() * sizeof(v[0]));
        },
        a.data);
  }
  w.u64(attrs_.size());
  for (const AttrEntry& a : attrs_) {
    w.str(a.object);
    w.str(a.name);
    w.u64(a.value.index());
    if (const auto* s = std::get_if<std::string>(&a.value)) w.str(*s);
    if (const auto* d = std::get_if<double>(&a.value)) w.bytes(d, sizeof *d);
    if (const auto* i = std::get_if<int64_t>(&a.value)) w.bytes(i, sizeof *i);
  }
  return std::move(w.out);
}

ResultSet ResultSet::deserialize(std::string_view bytes, size_t* consumed) {
  Reader r{bytes};
  char magic[sizeof kMagic];
  r.bytes(magic, sizeof magic);
  SL_CHECK(std::memcmp(magic, kMagic, sizeof kMagic) == 0, "result set: bad magic");
  ResultSet set;
  const uint64_t n_arrays = r.u64();
  for (uint64_t i = 0; i < n_arrays; ++i) {
    std::string name = r.str();
    const uint64_t type = r.u64(), ndim = r.u64();
    SL_CHECK(ndim <= 32, "result set: %s has %llu dimensions", name.c_str(), (unsigned long long)ndim);
    std::vector<int64_t> dims;
    for (uint64_t d = 0; d < ndim; ++d) dims.push_back(int64_t(r.u64()));
    const uint64_t n = r.u64();
    auto read = [&](auto tag) {
      using T = decltype(tag);
      r.need(n * sizeof(T));
      std::vector<T> v(static_cast<size_t>(n));
      r.bytes(v.data(), v.size() * sizeof(T));
      return Data(std::move(v));
    };
    Data data;
    if (type == 0) data = read(double{});
    else if (type == 1) data = read(float{});
    else if (type == 2) data = read(int32_t{});
    else SL_FAIL("result set: %s has unknown type %llu", name.c_str(), (unsigned long long)type);
    set.add_array(name, std::move(dims), std::move(data));
  }
  const uint64_t n_attrs = r.u64();
  for (uint64_t i = 0; i < n_attrs; ++i) {
    std::string object = r.str(), name = r.str();
    const uint64_t type = r.u64();
    Value value;
    if (type == 0) {
      value = r.str();
    } else if (type == 1) {
      double d;
      r.bytes(&d, sizeof d);
      value = d;
    } else if (type == 2) {
      int64_t v;
      r.bytes(&v, sizeof v);
      value = v;
    } else {
      SL_FAIL("result set: attribute %s has unknown type %llu", name.c_str(), (unsigned long long)type);
    }
    set.attrs_.push_back({std::move(object), std::move(name), std::move(value)});
  }
  if (consumed) *consumed = r.pos;
  return set;
}

void ResultSet::write(ResultsFile& file, const std::string& group) const {
  auto path = [&](const std::string& rel) { return rel.empty() ? group : group + "/" + rel; };
  file.create_group(group);
  for (const ArrayEntry& a : arrays_) {
    const std::string obj = path(a.name);
    const size_t slash = obj.rfind('/');
    if (slash > 0 && slash != std::string::npos) file.create_group(obj.substr(0, slash));
    std::visit([&](const auto& v) { file.write_array(obj, a.dims, v.data()); }, a.data);
  }
  for (const AttrEntry& a : attrs_) {
    const std::string obj = path(a.object);
    if (!file.exists(obj)) file.create_group(obj);
    std::visit([&](const auto& v) { file.set_attr(obj, a.name, v); }, a.value);
  }
}

}  // namespace sinklab::io
