// ResultsSchema (results_schema.hpp): the parser of src/io/results_schema.tsv and the write check.
#include "io/results_schema.hpp"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "core/error.hpp"

namespace sinklab::io {

namespace {

constexpr const char* kKindNames[] = {"group", "attr", "column", "series", "array"};

std::vector<std::string> components(const std::string& path) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(path);
  while (std::getline(in, part, '/'))
    if (!part.empty()) out.push_back(part);
  return out;
}

bool is_placeholder(const std::string& c) { return c.size() > 2 && c.front() == '{' && c.back() == '}'; }

bool path_matches(const std::vector<std::string>& pattern, const std::vector<std::string>& path) {
  if (pattern.size() != path.size()) return false;
  for (size_t i = 0; i < path.size(); ++i)
    if (!is_placeholder(pattern[i]) && pattern[i] != path[i]) return false;
  return true;
}

// "[n,L,H]" -> {-1,-1,-1}; "[P,2]" -> {-1,2}; "-" -> {}.
std::vector<int64_t> parse_dims(const std::string& text, const std::string& where) {
  if (text == "-") return {};
  SL_CHECK(text.size() >= 2 && text.front() == '[' && text.back() == ']', "%s: shape '%s' is not [d,...] or -",
           where.c_str(), text.c_str());
  std::vector<int64_t> dims;
  const std::string inner = text.substr(1, text.size() - 2);
  for (size_t start = 0;;) {
    const size_t comma = std::min(inner.find(',', start), inner.size());
    const std::string d = inner.substr(start, comma - start);
    SL_CHECK(!d.empty(), "%s: empty dimension in %s", where.c_str(), text.c_str());
    const bool number = d.find_first_not_of("0123456789") == std::string::npos;
    dims.push_back(number ? std::stoll(d) : -1);
    if (comma == inner.size()) return dims;
    start = comma + 1;
  }
}

std::string describe(ResultsSchema::Kind kind, const std::string& obj, const std::string& attr,
                     const std::string& dtype, const std::vector<int64_t>& dims) {
  std::string what = kKindNames[int(kind)];
  what += " " + obj + (kind == ResultsSchema::Kind::attr ? "@" + attr : "");
  if (dtype != "-") what += " " + dtype;
  if (kind == ResultsSchema::Kind::column || kind == ResultsSchema::Kind::series ||
      kind == ResultsSchema::Kind::array) {
    std::string shape;
    for (int64_t d : dims) shape += strfmt("%s%lld", shape.empty() ? "" : ",", (long long)d);
    what += " [" + shape + "]";
  }
  return what;
}

}  // namespace

ResultsSchema ResultsSchema::parse(const std::string& text, const std::string& source) {
  ResultsSchema s;
  s.source_ = source;
  std::istringstream in(text);
  std::string line;
  for (int no = 1; std::getline(in, line); ++no) {
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string::npos || line[first] == '#') continue;
    const std::string where = strfmt("%s:%d", source.c_str(), no);
    std::istringstream fields(line);
    std::string kind, path, dtype, shape, writer, reader;
    fields >> kind >> path >> dtype >> shape >> writer;
    std::getline(fields >> std::ws, reader);
    SL_CHECK(!writer.empty() && !reader.empty(), "%s: needs kind, path, dtype, shape, writer and reader", where.c_str());
    Item item;
    item.line = no;
    int k = 0;
    while (k < 5 && kind != kKindNames[k]) ++k;
    SL_CHECK(k < 5, "%s: unknown kind '%s'", where.c_str(), kind.c_str());
    item.kind = Kind(k);
    SL_CHECK(path.front() == '/', "%s: path '%s' is not absolute", where.c_str(), path.c_str());
    if (item.kind == Kind::attr) {
      const size_t at = path.rfind('@');
      SL_CHECK(at != std::string::npos && at + 1 < path.size(), "%s: attr path '%s' has no @<name>", where.c_str(),
               path.c_str());
      item.attr = path.substr(at + 1);
      path = path.substr(0, at);
    }
    item.path = components(path);
    item.dtype = dtype;
    item.dims = parse_dims(shape, where);
    item.writer = writer;
    item.reader = reader;
    s.items_.push_back(std::move(item));
  }
  SL_CHECK(!s.items_.empty(), "%s: declares nothing", source.c_str());
  return s;
}

ResultsSchema ResultsSchema::load(const std::string& path) {
  std::ifstream in(path);
  SL_CHECK(in.good(), "results schema %s: cannot open", path.c_str());
  std::stringstream text;
  text << in.rdbuf();
  return parse(text.str(), path);
}

const ResultsSchema* ResultsSchema::from_env() {
  static const ResultsSchema* const schema = []() -> const ResultsSchema* {
    const char* path = std::getenv("SINKLAB_SCHEMA_CHECK");
    if (!path || !*path) return nullptr;
    return new ResultsSchema(load(path));  // lives as long as the process
  }();
  return schema;
}

void ResultsSchema::check(const std::string& file, Kind kind, const std::string& obj, const std::string& attr,
                          const std::string& dtype, const std::vector<int64_t>& dims) const {
  const std::vector<std::string> path = components(obj);
  const Item* near = nullptr;  // the same object, another dtype or shape
  for (const Item& it : items_) {
    if (it.kind != kind || it.attr != attr || it.writer == "none" || !path_matches(it.path, path)) continue;
    bool same = it.dtype == dtype && (kind == Kind::group || kind == Kind::attr || it.dims.size() == dims.size());
    for (size_t i = 0; same && i < it.dims.size() && i < dims.size(); ++i)
      same = it.dims[i] < 0 || it.dims[i] == dims[i];
    if (same) return;
    near = &it;
  }
  const std::string what = describe(kind, obj, attr, dtype, dims);
  if (near)
    SL_FAIL("%s: undeclared write: %s (%s:%d declares it as %s %s)", file.c_str(), what.c_str(), source_.c_str(),
            near->line, near->dtype.c_str(), near->dims.empty() ? "-" : strfmt("rank %zu", near->dims.size()).c_str());
  SL_FAIL("%s: undeclared write: %s (not in the results schema %s)", file.c_str(), what.c_str(), source_.c_str());
}

void ResultsSchema::check_group(const std::string& file, const std::string& obj) const {
  check(file, Kind::group, obj, "", "-", {});
}

void ResultsSchema::check_attr(const std::string& file, const std::string& obj, const std::string& name,
                               const std::string& dtype) const {
  check(file, Kind::attr, obj, name, dtype, {});
}

void ResultsSchema::check_dataset(const std::string& file, Kind kind, const std::string& obj, const std::string& dtype,
                                  const std::vector<int64_t>& dims) const {
  check(file, kind, obj, "", dtype, dims);
}

}  // namespace sinklab::io
