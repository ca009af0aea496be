// PyTorch checkpoints (src/io/zip.*, torch_pickle.*, torch_file.*): torch.save's own output
// (tests/fixtures/torch/tensors.pt and the .bin model fixtures, made by
// tests/python/goldens/gen_hf_torch_bin.py) read against values numpy wrote; archives and pickles
// crafted here (stored zip writer, ZIP64 too, and a byte-level pickle builder) for what torch.save never
// writes: truncations, offsets out of bounds, compressed entries, and pickles that reach for os.system,
// builtins.eval or any other global. Every failure is one line naming the file; a refused payload would
// have created a marker file, which must not exist afterwards.

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "hf/checkpoint.hpp"
#include "io/safetensors.hpp"
#include "io/torch_file.hpp"
#include "io/torch_pickle.hpp"
#include "io/zip.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;

const std::string kFixtures = std::string(SINKLAB_SOURCE_DIR) + "/tests/fixtures";

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& tag) {
    path = (fs::temp_directory_path() / ("sinklab_torch_" + tag + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// Runs f, which must throw sinklab::Error: one line, containing every needle.
template <class F>
void expect_error(F f, const std::vector<std::string>& needles) {
  try {
    f();
    ADD_FAILURE() << "no error (wanted: " << needles.at(0) << ")";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
    for (const std::string& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

// ---- a stored zip writer (APPNOTE 6.3; ZIP64 records on request even for tiny archives) ---------------

void put(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((v >> (8 * i)) & 0xFF));
}

std::string make_zip(const std::vector<std::pair<std::string, std::string>>& entries, bool zip64 = false) {
  std::string out, central;
  for (const auto& [name, data] : entries) {
    const uint64_t local = out.size(), n = data.size();
    const uint32_t crc = io::crc32(data.data(), data.size());
    const uint64_t small = zip64 ? 0xFFFFFFFFu : n;
    put(out, 0x04034b50, 4);
    put(out, 45, 2);
    put(out, 0, 2);  // flags
    put(out, 0, 2);  // stored
    put(out, 0, 4);  // time, date
    put(out, crc, 4);
    put(out, small, 4);
    put(out, small, 4);
    put(out, name.size(), 2);
    put(out, zip64 ? 20 : 0, 2);
    out += name;
    if (zip64) {
      put(out, 1, 2);
      put(out, 16, 2);
      put(out, n, 8);
      put(out, n, 8);
    }
    out += data;
    put(central, 0x02014b50, 4);
    put(central, 45, 2);
    put(central, 45, 2);
    put(central, 0, 2);
    put(central, 0, 2);
    put(central, 0, 4);
    put(central, crc, 4);
    put(central, small, 4);
    put(central, small, 4);
    put(central, name.size(), 2);
    put(central, zip64 ? 28 : 0, 2);
    put(central, 0, 2);  // comment
    put(central, 0, 2);  // disk
    put(central, 0, 2);  // internal attributes
    put(central, 0, 4);  // external attributes
    put(central, zip64 ? 0xFFFFFFFFu : local, 4);
    central += name;
    if (zip64) {
      put(central, 1, 2);
      put(central, 24, 2);
      put(central, n, 8);
      put(central, n, 8);
      put(central, local, 8);
    }
  }
  const uint64_t dir_offset = out.size(), dir_size = central.size(), count = entries.size();
  out += central;
  if (zip64) {
    const uint64_t rec = out.size();
    put(out, 0x06064b50, 4);
    put(out, 44, 8);
    put(out, 45, 2);
    put(out, 45, 2);
    put(out, 0, 4);
    put(out, 0, 4);
    put(out, count, 8);
    put(out, count, 8);
    put(out, dir_size, 8);
    put(out, dir_offset, 8);
    put(out, 0x07064b50, 4);
    put(out, 0, 4);
    put(out, rec, 8);
    put(out, 1, 4);
  }
  put(out, 0x06054b50, 4);
  put(out, 0, 2);
  put(out, 0, 2);
  put(out, zip64 ? 0xFFFF : count, 2);
  put(out, zip64 ? 0xFFFF : count, 2);
  put(out, zip64 ? 0xFFFFFFFFu : dir_size, 4);
  put(out, zip64 ? 0xFFFFFFFFu : dir_offset, 4);
  put(out, 0, 2);
  return out;
}

// ---- a pickle builder (the opcodes torch.save writes at protocol 2) -----------------------------------

struct Pickle {
  std::string b = std::string("\x80\x02", 2);
  Pickle& op(char c) {
    b.push_back(c);
    return *this;
  }
  Pickle& global(const std::string& module, const std::string& name) {
    b += "c" + module + "\n" + name + "\n";
    return *this;
  }
  Pickle& str(const std::string& s) {
    b.push_back('X');
    put(b, s.size(), 4);
    b += s;
    return *this;
  }
  Pickle& integer(int32_t v) {
    b.push_back('J');
    put(b, uint32_t(v), 4);
    return *this;
  }
  Pickle& ints(const std::vector<int32_t>& v) {  // a tuple of ints
    op('(');
    for (int32_t x : v) integer(x);
    return op('t');
  }
  // _rebuild_tensor_v2(('storage', torch.<type>, key, 'cpu', numel), offset, size, stride, False, OrderedDict())
  Pickle& tensor(const std::string& type, const std::string& key, int32_t numel, int32_t offset,
                 const std::vector<int32_t>& size, const std::vector<int32_t>& stride) {
    global("torch._utils", "_rebuild_tensor_v2").op('(');
    op('(').str("storage").global("torch", type).str(key).str("cpu").integer(numel).op('t').op('Q');
    integer(offset).ints(size).ints(stride).op('\x89');
    global("collections", "OrderedDict").op(')').op('R');
    return op('t').op('R');
  }
  std::string stop() { return b + "."; }
};

std::string f32_bytes(const std::vector<float>& v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }

// A torch.save-like archive: archive/data.pkl, archive/byteorder, archive/data/<key> records.
std::string torch_zip(const std::string& pickle, const std::vector<std::pair<std::string, std::string>>& records,
                      bool zip64 = false) {
  std::vector<std::pair<std::string, std::string>> entries = {{"archive/data.pkl", pickle}, {"archive/byteorder", "little"}};
  for (const auto& [key, bytes] : records) entries.emplace_back("archive/data/" + key, bytes);
  return make_zip(entries, zip64);
}

// {"w": a [2,3] f32 tensor at offset 1 of storage "0" (7 floats)} as an OrderedDict.
std::string good_pickle() {
  return Pickle().global("collections", "OrderedDict").op(')').op('R').op('(').str("w")
      .tensor("FloatStorage", "0", 7, 1, {2, 3}, {3, 1}).op('u').stop();
}
const std::vector<float> kStorage = {9, 0, 1, 2, 3, 4, 5};

// ---- torch.save's own files ---------------------------------------------------------------------------

TEST(TorchFile, ReadsWhatTorchSaveWrote) {
  io::TorchFile f(kFixtures + "/torch/tensors.pt");
  io::SafetensorsFile expected(kFixtures + "/torch/tensors_expected.safetensors");
  const std::map<std::string, DType> dtypes = {{"f32", DType::f32}, {"f16", DType::f16}, {"bf16", DType::bf16},
                                               {"f64", DType::f64}, {"i32", DType::i32}, {"scalar", DType::f32},
                                               {"param", DType::f32}, {"transposed", DType::f32},
                                               {"every_other_row", DType::f32}, {"shared_a", DType::f32},
                                               {"shared_b", DType::f32}};
  for (const auto& [name, dtype] : dtypes) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.contains(name));
    Tensor got = f.view(name), want = expected.view("t/" + name);
    EXPECT_EQ(got.dtype, dtype);
    // (numpy's ascontiguousarray wrote the 0-d scalar as [1].)
    if (name != "scalar") {
      ASSERT_EQ(test::dims_of(got), test::dims_of(want));
    }
    ASSERT_EQ(got.numel(), want.numel());
    for (int64_t i = 0; i < want.numel(); ++i) ASSERT_EQ(test::element(got, i), test::element(want, i)) << i;
  }
  // Views as torch keeps them: strides and offsets, two tensors over one storage.
  EXPECT_EQ(f.entry("transposed").strides, (std::vector<int64_t>{1, 5}));
  EXPECT_FALSE(f.entry("transposed").contiguous());
  EXPECT_EQ(f.entry("every_other_row").strides, (std::vector<int64_t>{10, 1}));
  EXPECT_TRUE(f.entry("f32").contiguous());
  EXPECT_EQ(f.entry("shared_b").begin, f.entry("shared_a").begin + 8 * 4);
  EXPECT_LT(f.entry("shared_b").begin, f.entry("shared_a").end);  // they overlap, as in the file
  EXPECT_EQ(f.entry("scalar").shape.size(), 0u);
  // An int64 buffer is listed but not readable: one line naming the dtype.
  EXPECT_TRUE(f.contains("i64"));
  expect_error([&] { f.entry("i64"); }, {kFixtures + "/torch/tensors.pt: tensor 'i64' has dtype int64"});
  expect_error([&] { f.view("nope"); }, {kFixtures + "/torch/tensors.pt: missing tensor 'nope'"});
  // Releasing pages leaves the views readable (they fault back in from the file).
  f.release_all();
  EXPECT_EQ(test::element(f.view("transposed"), 1), test::element(expected.view("t/transposed"), 1));
}

TEST(TorchFile, ModelCheckpointsResolveTiedAndStridedTensors) {
  // OPT's tied head: lm_head.weight and the token table are one storage in pytorch_model.bin.
  hf::Checkpoint opt(kFixtures + "/hf/opt_bin_tied");
  EXPECT_EQ(opt.source(), kFixtures + "/hf/opt_bin_tied/pytorch_model.bin");
  EXPECT_EQ(opt.entry("lm_head.weight").begin, opt.entry("model.decoder.embed_tokens.weight").begin);
  EXPECT_EQ(opt.entry("lm_head.weight").end, opt.entry("model.decoder.embed_tokens.weight").end);
  // Sharded: the index names the shards; the names are the hub's ("decoder.*").
  hf::Checkpoint sharded(kFixtures + "/hf/opt_bin_sharded");
  EXPECT_EQ(sharded.source(), kFixtures + "/hf/opt_bin_sharded/pytorch_model.bin.index.json");
  EXPECT_TRUE(sharded.has("decoder.layers.1.fc2.weight"));
  EXPECT_NE(sharded.file("decoder.layers.0.fc1.weight").path(), sharded.file("decoder.layers.1.fc2.weight").path());
  // GPT-2 with a transposed view and an offset view (gen_hf_torch_bin.as_views).
  hf::Checkpoint gpt2(kFixtures + "/hf/gpt2_bin");
  const io::TensorEntry& c_attn = gpt2.entry("transformer.h.0.attn.c_attn.weight");
  EXPECT_FALSE(c_attn.contiguous());
  EXPECT_EQ(c_attn.strides, (std::vector<int64_t>{1, 16}));
  EXPECT_TRUE(gpt2.entry("transformer.h.1.attn.c_attn.weight").contiguous());
  const io::TensorEntry& wte = gpt2.entry("transformer.wte.weight");
  const io::TensorEntry& wpe = gpt2.entry("transformer.wpe.weight");
  EXPECT_NE(wte.begin % 64, 0u);  // 24 floats into its storage record (records are 64-byte aligned)
  EXPECT_TRUE(wte.contiguous() && wpe.contiguous());
}

// ---- the zip reader -------------------------------------------------------------------------------------

TEST(Zip, ReadsStoredEntriesAndZip64) {
  TempDir tmp("zip");
  for (bool zip64 : {false, true}) {
    SCOPED_TRACE(zip64 ? "zip64" : "zip");
    const std::string path = tmp.path + (zip64 ? "/z64.zip" : "/z.zip");
    write_bytes(path, make_zip({{"a/x", "hello"}, {"a/empty", ""}, {"a/y", std::string(1000, 'q')}}, zip64));
    io::MappedFile file(path);
    io::ZipReader zip(file, path);
    ASSERT_EQ(zip.entries().size(), 3u);
    EXPECT_EQ(zip.bytes(zip.at("a/x")), "hello");
    EXPECT_EQ(zip.bytes(zip.at("a/empty")), "");
    EXPECT_EQ(zip.bytes(zip.at("a/y")), std::string(1000, 'q'));
    for (const io::ZipEntry& e : zip.entries()) zip.check_crc(e);
    EXPECT_EQ(zip.find("a/z"), nullptr);
    expect_error([&] { zip.at("a/z"); }, {path + ": no entry 'a/z' in the zip archive"});
  }
  // torch.save's archive: the reader agrees with Python's zipfile on names (and CRCs).
  const std::string pt = kFixtures + "/torch/tensors.pt";
  io::MappedFile file(pt);
  io::ZipReader zip(file, pt);
  ASSERT_NE(zip.find("tensors/data.pkl"), nullptr);
  for (const io::ZipEntry& e : zip.entries()) zip.check_crc(e);
  EXPECT_EQ(io::crc32("123456789", 9), 0xCBF43926u);  // the CRC-32 check value
}

TEST(Zip, TruncatedOrCorruptArchivesFailWithOneLine) {
  TempDir tmp("zipbad");
  const std::string bytes = read_bytes(kFixtures + "/torch/tensors.pt");
  const std::string path = tmp.path + "/cut.pt";
  // Every truncation point (one in 37 bytes and the last few): an error naming the file, never a crash.
  for (size_t n = 0; n < bytes.size(); n += (n + 64 >= bytes.size() ? 1 : 37)) {
    write_bytes(path, bytes.substr(0, n));
    expect_error([&] { io::TorchFile f(path); }, {path + ": "});
  }
  // The central directory offset moved past the file: torch.save writes ZIP64 end records (whose offset
  // counts), a plain archive only the classic one.
  std::string bad = bytes;
  const size_t rec = bad.rfind(std::string("PK\x06\x06", 4));
  ASSERT_NE(rec, std::string::npos);
  std::string moved = bad;
  moved[rec + 48 + 4] = '\x01';  // + 2^32
  write_bytes(path, moved);
  expect_error([&] { io::TorchFile f(path); }, {path + ": corrupt zip archive (central directory"});
  std::string plain = torch_zip(good_pickle(), {{"0", f32_bytes(kStorage)}});
  plain[plain.rfind(std::string("PK\x05\x06", 4)) + 19] = '\x7f';
  write_bytes(path, plain);
  expect_error([&] { io::TorchFile f(path); }, {path + ": corrupt zip archive (central directory"});
  const size_t dir = bad.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(dir, std::string::npos);
  bad[dir + 42 + 3] = '\x40';  // local header offset 0x40xxxxxx
  write_bytes(path, bad);
  expect_error([&] { io::TorchFile f(path); }, {path + ": corrupt zip archive (local header of '"});
  // A compressed entry, an entry whose data runs past the directory, a corrupt pickle.
  std::string deflated = make_zip({{"archive/data.pkl", good_pickle()}});
  deflated[8] = 8;                                                    // local: method deflate
  deflated[deflated.find(std::string("PK\x01\x02", 4)) + 10] = 8;     // central: method deflate
  write_bytes(path, deflated);
  expect_error([&] { io::TorchFile f(path); }, {path + ": entry 'archive/data.pkl' is compressed"});
  std::string longer = make_zip({{"archive/data.pkl", good_pickle()}});
  const size_t c = longer.find(std::string("PK\x01\x02", 4));
  longer[c + 26] = '\x7f';  // uncompressed size 0x7fxxxx
  longer[c + 22] = '\x7f';  // compressed size
  write_bytes(path, longer);
  expect_error([&] { io::TorchFile f(path); }, {path + ": entry 'archive/data.pkl'", "runs past the data"});
  std::string flipped = torch_zip(good_pickle(), {{"0", f32_bytes(kStorage)}});
  flipped[flipped.find("storage") + 1] ^= 1;
  write_bytes(path, flipped);
  expect_error([&] { io::TorchFile f(path); }, {path + ": entry 'archive/data.pkl' is corrupt (CRC-32"});
  write_bytes(path, "not a zip at all, and longer than twenty-two bytes");
  expect_error([&] { io::TorchFile f(path); }, {path + ": not a zip archive"});
  write_bytes(path, std::string("\x80\x02\x8a\x0a", 4) + std::string(40, '\0'));
  expect_error([&] { io::TorchFile f(path); }, {path + ": a legacy (pre-1.6, non-zip) torch.save file"});
}

// ---- the restricted unpickler ---------------------------------------------------------------------------

TEST(TorchPickle, ReadsACraftedStateDictInZipAndZip64) {
  TempDir tmp("pickle");
  for (bool zip64 : {false, true}) {
    const std::string path = tmp.path + "/sd.pt";
    write_bytes(path, torch_zip(good_pickle(), {{"0", f32_bytes(kStorage)}}, zip64));
    io::TorchFile f(path);
    ASSERT_EQ(f.names(), std::vector<std::string>{"w"});
    Tensor w = f.view("w");
    ASSERT_EQ(test::dims_of(w), (std::vector<int64_t>{2, 3}));
    for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(test::element(w, i), double(i));
  }
}

TEST(TorchPickle, ViewsOutsideTheirStorageAndShortRecordsAreRefused) {
  TempDir tmp("offsets");
  const std::string path = tmp.path + "/sd.pt";
  auto with = [&](int32_t numel, int32_t offset, std::vector<int32_t> size, std::vector<int32_t> stride,
                  const std::string& record) {
    const std::string pkl = Pickle().op('}').op('(').str("w").tensor("FloatStorage", "0", numel, offset, size, stride)
                                .op('u').stop();
    write_bytes(path, torch_zip(pkl, {{"0", record}}));
  };
  with(7, 2, {2, 3}, {3, 1}, f32_bytes(kStorage));  // offset 2 + 6 elements > 7
  expect_error([&] { io::TorchFile f(path); }, {path + ": tensor 'w': view [offset 2, +6 elements) outside its storage"});
  with(7, 0, {3, 3}, {1, 3}, f32_bytes(kStorage));  // strides reach element 8
  expect_error([&] { io::TorchFile f(path); }, {path + ": tensor 'w'", "outside its storage"});
  with(7, 99, {1}, {1}, f32_bytes(kStorage));
  expect_error([&] { io::TorchFile f(path); }, {path + ": tensor 'w': offset 99 outside its storage"});
  with(8, 0, {2, 3}, {3, 1}, f32_bytes(kStorage));  // the id says 8 elements, the record holds 7
  expect_error([&] { io::TorchFile f(path); }, {path + ": tensor 'w': storage record 'archive/data/0' holds 28 bytes"});
  with(7, 0, {2, 3}, {3, -1}, f32_bytes(kStorage));
  expect_error([&] { io::TorchFile f(path); }, {path + ": tensor 'w'"});
  with(7, 0, {2, 3}, {3, 1}, f32_bytes(kStorage));
  write_bytes(path, make_zip({{"archive/data.pkl", good_pickle()}}));  // no record
  expect_error([&] { io::TorchFile f(path); }, {path + ": no entry 'archive/data/0' in the zip archive"});
  write_bytes(path, torch_zip(good_pickle().substr(0, 33), {{"0", f32_bytes(kStorage)}}));
  expect_error([&] { io::TorchFile f(path); }, {path + ": archive/data.pkl: truncated pickle"});
  write_bytes(path, torch_zip(Pickle().ints({1, 2}).stop(), {}));
  expect_error([&] { io::TorchFile f(path); }, {path + ": archive/data.pkl: the pickle holds a tuple, not a state dict"});
  write_bytes(path, torch_zip(Pickle().op('}').str("n").integer(3).op('s').stop(), {}));
  expect_error([&] { io::TorchFile f(path); }, {path + ": archive/data.pkl: state dict entry 'n' is a int, not a tensor"});
}

// Payloads that would run code under pickle.load: each is refused with one line naming the file and the
// global, and the marker file the command would have created does not exist.
TEST(TorchPickle, GlobalsOutsideTheStateDictSetAreRefusedAndNothingRuns) {
  TempDir tmp("evil");
  const std::string marker = tmp.path + "/pwned";
  const std::string command = "touch " + marker;
  struct Case {
    std::string pickle, global;
  };
  auto call = [&](const std::string& module, const std::string& name) {
    return Pickle().global(module, name).str(command).op('\x85').op('R').stop();
  };
  std::vector<Case> cases = {
      {call("posix", "system"), "posix.system"},  // what pickle writes for os.system on Linux
      {call("os", "system"), "os.system"},
      {call("builtins", "eval"), "builtins.eval"},
      {call("builtins", "exec"), "builtins.exec"},
      {call("__builtin__", "eval"), "__builtin__.eval"},
      {call("subprocess", "check_call"), "subprocess.check_call"},
      {call("builtins", "getattr"), "builtins.getattr"},
      {call("torch", "load"), "torch.load"},
      {call("torch.nn.modules.linear", "Linear"), "torch.nn.modules.linear.Linear"},  // a class: any other global
      {call("collections", "defaultdict"), "collections.defaultdict"},
      {call("torch._utils", "_rebuild_tensor"), "torch._utils._rebuild_tensor"},
      // STACK_GLOBAL (protocol 4) spelling.
      {Pickle().str("builtins").str("eval").op('\x93').str(command).op('\x85').op('R').stop(), "builtins.eval"},
      // Deep inside an otherwise valid state dict, after a tensor.
      {Pickle().op('}').op('(').str("w").tensor("FloatStorage", "0", 7, 1, {2, 3}, {3, 1}).str("x")
           .global("posix", "system").str(command).op('\x85').op('R').op('u').stop(), "posix.system"},
  };
  const std::string path = tmp.path + "/evil.bin";
  for (const Case& c : cases) {
    SCOPED_TRACE(c.global);
    write_bytes(path, torch_zip(c.pickle, {{"0", f32_bytes(kStorage)}}));
    expect_error([&] { io::TorchFile f(path); }, {path + ": archive/data.pkl: refused pickle global '" + c.global + "'"});
    // And as a model checkpoint: the same one line.
    write_bytes(tmp.path + "/pytorch_model.bin", torch_zip(c.pickle, {{"0", f32_bytes(kStorage)}}));
    expect_error([&] { hf::Checkpoint ck(tmp.path); }, {tmp.path + "/pytorch_model.bin: archive/data.pkl: refused pickle global"});
    EXPECT_FALSE(fs::exists(marker));
  }
  // Other ways to call or build: opcodes outside the state-dict subset, calls of allowed globals that are
  // not functions, persistent ids that are not storages, BUILD on a tensor.
  const std::vector<std::pair<std::string, std::string>> refused = {
      {Pickle().global("collections", "OrderedDict").op(')').op('\x81').stop(), "refused pickle opcode 0x81"},  // NEWOBJ
      {Pickle().op('(').global("collections", "OrderedDict").op('o').stop(), "refused pickle opcode 0x6f"},     // OBJ
      {Pickle().b + "ios\nsystem\n.", "refused pickle opcode 0x69"},                                            // INST
      {Pickle().b + "P0\n.", "refused pickle opcode 0x50"},                                                    // PERSID
      {Pickle().global("torch", "FloatStorage").op(')').op('R').stop(), "refused pickle call of torch.FloatStorage"},
      {Pickle().op('(').str(command).op('t').op('Q').stop(), "refused persistent id"},
      {Pickle().global("collections", "OrderedDict").op('(').str(command).op('t').op('R').stop(),
       "refused OrderedDict(...) with arguments"},
      {Pickle().op('}').op('(').str("w").tensor("FloatStorage", "0", 7, 1, {2, 3}, {3, 1}).op('}').op('b').op('u').stop(),
       "refused pickle BUILD of a tensor"},
  };
  for (const auto& [pkl, needle] : refused) {
    SCOPED_TRACE(needle);
    write_bytes(path, torch_zip(pkl, {{"0", f32_bytes(kStorage)}}));
    expect_error([&] { io::TorchFile f(path); }, {path + ": archive/data.pkl: " + needle});
  }
  EXPECT_FALSE(fs::exists(marker));
}

}  // namespace
}  // namespace sinklab
