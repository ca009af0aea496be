// Core: Philox known answers, dtype conversions, tensor views, safetensors and shard round trips.
#include <gtest/gtest.h>

#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <vector>

#include "core/arena.hpp"
#include "core/options.hpp"
#include "core/philox.hpp"
#include "io/shard.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

// Random123's kat_vectors for philox4x32-10: counter, key -> output.
TEST(Philox, Random123KnownAnswers) {
  struct Kat { Philox4x32 ctr; uint32_t k0, k1; Philox4x32 want; };
  const Kat kats[] = {
      {{{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
       {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
       {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}},
  };
  for (const Kat& k : kats) {
    Philox4x32 got = philox4x32_10(k.ctr, k.k0, k.k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], k.want.v[i]);
  }
}

// The first values of sinklab's stream convention for (seed 0x243f6a8885a308d3, stream 7): a CUDA
// build must reproduce exactly these (tests/cpp/gpu/test_cuda_backend checks it on a device).
TEST(Philox, StreamFirstValuesAreFixed) {
  const uint64_t seed = 0x243f6a8885a308d3ull, stream = 7;
  // Word i of the stream is word i%4 of the block with counter (i/4, 0, stream, 0).
  for (uint64_t i = 0; i < 8; ++i) {
    Philox4x32 ctr = {{uint32_t(i / 4), 0, uint32_t(stream), 0}};
    EXPECT_EQ(philox_u32(seed, stream, i), philox4x32_10(ctr, uint32_t(seed), uint32_t(seed >> 32)).v[i % 4]);
  }
  // Computed by an independent Python Philox of the same convention (not by this code).
  const uint32_t expected[4] = {0x388b67beu, 0x79626effu, 0x190e4609u, 0xf42dbaeeu};
  for (uint64_t i = 0; i < 4; ++i) EXPECT_EQ(philox_u32(seed, stream, i), expected[i]) << "word " << i;
  // Uniforms lie in (0,1) and normals have the right moments over many draws.
  double mean = 0, var = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    float u = philox_uniform(seed, stream, uint64_t(i));
    ASSERT_GT(u, 0.0f);
    ASSERT_LT(u, 1.0f);
    double z = philox_normal(seed, stream, uint64_t(i));
    mean += z;
    var += z * z;
  }
  mean /= n;
  var = var / n - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.01);
}

TEST(DType, Bf16AndF16RoundTrip) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);  // tie -> even
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_f16(1.0f), 0x3c00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7bff);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(f32_to_f16(5.960464477539063e-08f), 0x0001);  // smallest subnormal
  // Every half value converts to float and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    uint32_t exp = (h >> 10) & 0x1f;
    if (exp == 31 && (h & 0x3ff)) continue;  // NaN payloads
    EXPECT_EQ(f32_to_f16(f16_to_f32(uint16_t(h))), h) << std::hex << h;
  }
}

TEST(Tensor, ViewsSliceSplit) {
  test::Owned a(DType::f32, {4, 6});
  for (int i = 0; i < 24; ++i) a.data<float>()[i] = float(i);
  Tensor s = a.t.slice(1, 2, 3);
  EXPECT_EQ(s.shape[1], 3);
  EXPECT_EQ(test::element(s, 0), 2.0);
  EXPECT_EQ(test::element(s, 3), 8.0);
  Tensor h = a.t.split_dim(1, 2, 3);  // [4, 2, 3]
  EXPECT_EQ(h.ndim, 3);
  EXPECT_EQ(test::element(h.slice(1, 1, 1), 0), 3.0);
  EXPECT_THROW(a.t.reshape({5, 5}), Error);
  EXPECT_THROW(a.t.slice(0, 3, 2), Error);
}

TEST(Arena, AlignsAndTracksPeak) {
  Buffer buf(4096, Device::cpu());
  Arena arena(buf.data(), buf.bytes(), Device::cpu());
  Tensor x = arena.alloc(DType::f32, {3});
  Tensor y = arena.alloc(DType::f32, {5});
  EXPECT_EQ(reinterpret_cast<uintptr_t>(y.data) % 64, 0u);
  EXPECT_EQ(arena.used(), 128u);
  arena.reset();
  EXPECT_EQ(arena.peak(), 128u);
  EXPECT_THROW(arena.alloc(DType::f32, {2000}), Error);
  (void)x;
}

TEST(Buffer, EnsureGrowsOnlyWhenTooSmall) {
  Buffer buf;
  buf.ensure(0, Device::cpu());  // an empty request still gives a block (64 bytes), never a null one
  ASSERT_NE(buf.data(), nullptr);
  EXPECT_EQ(buf.bytes(), 64u);
  buf.ensure(1000, Device::cpu());
  EXPECT_EQ(buf.bytes(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buf.data()) % 64, 0u);
  static_cast<char*>(buf.data())[999] = 42;
  void* const block = buf.data();
  buf.ensure(10, Device::cpu());  // fits: the same block, contents kept
  buf.ensure(1000, Device::cpu());
  EXPECT_EQ(buf.data(), block);
  EXPECT_EQ(buf.bytes(), 1000u);
  EXPECT_EQ(static_cast<char*>(buf.data())[999], 42);
  buf.ensure(1001, Device::cpu());  // one byte more: a new block of the new size
  EXPECT_EQ(buf.bytes(), 1001u);
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "sinklab_" + name;
}

TEST(Safetensors, RoundTripAndValidation) {
  test::Owned a(DType::f32, {2, 3});
  test::Owned b(DType::f64, {4});
  for (int i = 0; i < 6; ++i) a.data<float>()[i] = float(i) * 0.5f;
  for (int i = 0; i < 4; ++i) b.data<double>()[i] = -double(i);
  std::string path = temp_path("rt.safetensors");
  io::write_safetensors(path, {{"a", a.t}, {"b", b.t}}, {{"note", "hi"}});
  io::SafetensorsFile f(path);
  EXPECT_EQ(f.metadata().at("note"), "hi");
  EXPECT_EQ(test::rel_error(f.view("a"), a.t), 0.0);
  EXPECT_EQ(test::rel_error(f.view("b"), b.t), 0.0);
  EXPECT_THROW(f.view("missing"), Error);
  // A truncated copy is refused with a message naming the file.
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  std::string cut = temp_path("cut.safetensors");
  std::ofstream(cut, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size() - 4));
  try {
    io::SafetensorsFile bad(cut);
    FAIL() << "truncated file accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(cut), std::string::npos) << e.what();
  }
}

TEST(Shard, RoundTripAndCorruption) {
  std::vector<uint32_t> tokens = {5, 1, 2, 0, 7, 7, 0};
  std::string path = temp_path("rt.bin");
  io::write_shard(path, tokens, 8, 2, 0);
  io::Shard s(path);
  ASSERT_EQ(s.size(), tokens.size());
  EXPECT_EQ(s.header().token_bytes, 2u);
  EXPECT_EQ(s.header().n_documents, 2u);
  std::vector<int32_t> out(tokens.size());
  s.read(0, tokens.size(), out.data());
  for (size_t i = 0; i < tokens.size(); ++i) EXPECT_EQ(uint32_t(out[i]), tokens[i]);
  EXPECT_THROW(io::write_shard(path, {9}, 8, 1, 0), Error);  // token outside the vocabulary
  // Flip one token byte: the CRC catches it.
  {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(64 + 2);
    f.put(char(3));
  }
  EXPECT_THROW(io::Shard{path}, Error);
}

// Issue 44: shards whose CRCs are valid but whose content is not. edit_shard applies `edit` to the file's
// bytes, sets the header's version and makes both CRCs valid again (version 1: no header CRC), so that only
// the check under test can refuse the shard.
void edit_shard(const std::string& path, uint32_t version,
                const std::function<void(std::vector<unsigned char>&)>& edit) {
  std::ifstream in(path, std::ios::binary);
  std::vector<unsigned char> raw((std::istreambuf_iterator<char>(in)), {});
  in.close();
  edit(raw);
  const uint32_t crc = uint32_t(crc32(0L, raw.data() + 64, uInt(raw.size() - 64)));
  std::memcpy(&raw[48], &crc, 4);
  std::memcpy(&raw[8], &version, 4);
  const uint32_t header_crc = version >= 2 ? uint32_t(crc32(0L, raw.data(), 60)) : 0u;
  std::memcpy(&raw[60], &header_crc, 4);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(raw.data()), std::streamsize(raw.size()));
}

// Token `position` of a uint16 shard := id, both CRCs valid.
void rewrite_shard(const std::string& path, uint64_t position, uint16_t id, uint32_t version) {
  edit_shard(path, version, [&](std::vector<unsigned char>& raw) { std::memcpy(&raw[64 + position * 2], &id, 2); });
}

std::string open_error(const std::string& path) {
  try {
    io::Shard shard(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Shard, IdOutsideTheVocabularyIsRefusedOnOpen) {
  for (uint32_t version : {1u, 2u}) {
    const std::string path = temp_path("bad_id.bin");
    io::write_shard(path, {5, 1, 2, 0, 7, 7, 3, 0}, 8, 2, 0);
    rewrite_shard(path, 6, 65000, version);
    const std::string error = open_error(path);
    EXPECT_NE(error.find(path + ": token id 65000 at position 6 is outside the vocabulary [0, 8)"), std::string::npos)
        << "version " << version << ": " << error;
    io::Shard unchecked(path, /*verify_tokens=*/false);  // the header alone still opens (sinklab-probe's specials)
    EXPECT_EQ(unchecked.header().version, version);
    rewrite_shard(path, 6, 7, version);  // the largest id in the vocabulary
    EXPECT_EQ(open_error(path), "") << "version " << version;
  }
}

TEST(Shard, HeaderIsCoveredByItsChecksum) {
  const std::string path = temp_path("header.bin");
  io::write_shard(path, {5, 1, 2, 0}, 8, 1, 0);
  io::Shard good(path);
  EXPECT_EQ(good.header().version, 2u);
  EXPECT_NE(good.header().header_crc32, 0u);
  {  // vocab_size 8 -> 9: the tokens and their CRC are untouched
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(16);
    f.put(char(9));
  }
  const std::string error = open_error(path);
  EXPECT_NE(error.find(path + ": corrupted shard header"), std::string::npos) << error;
  try {
    io::Shard unchecked(path, /*verify_tokens=*/false);  // the header's CRC is checked whatever verify_tokens says
    FAIL() << "a changed header was accepted";
  } catch (const Error&) {
  }
}

TEST(Shard, VersionOneStillReads) {
  const std::string path = temp_path("v1.bin");
  io::write_shard(path, {5, 1, 2, 0, 7, 7, 0}, 8, 2, 0);
  rewrite_shard(path, 1, 1, 1);  // the same tokens in a version-1 header
  io::Shard s(path);
  EXPECT_EQ(s.header().version, 1u);
  EXPECT_EQ(s.header().header_crc32, 0u);
  EXPECT_EQ(s.size(), 7u);
  EXPECT_EQ(s.token(4), 7u);
}

// The vectorised reduction of the id check: every length (vector body and tail), the max anywhere.
TEST(Shard, MaxTokenIdSeesEveryId) {
  for (uint64_t n : {0, 1, 7, 16, 33, 1000}) {
    for (uint64_t at = 0; at < n; at += (n > 40 ? 97 : 1)) {
      std::vector<uint16_t> u16(n, 3);
      std::vector<uint32_t> u32(n, 3);
      u16[at] = 60000;
      u32[at] = 70000;
      EXPECT_EQ(io::max_token_id(reinterpret_cast<const unsigned char*>(u16.data()), n, 2), 60000u) << n << " " << at;
      EXPECT_EQ(io::max_token_id(reinterpret_cast<const unsigned char*>(u32.data()), n, 4), 70000u) << n << " " << at;
    }
  }
  EXPECT_EQ(io::max_token_id(nullptr, 0, 2), 0u);
}

// Found by tests/fuzz/fuzz_shard (its regression case n_tokens_wraps_to_file_size): a token count whose
// byte size wraps around 2^64 to the file's real size was accepted, and reading then ran off the mapping.
TEST(Shard, TokenCountThatWrapsAroundIsRefused) {
  std::string path = temp_path("wrap.bin");
  io::write_shard(path, {5, 6, 7, 0}, 100, 1, 0);
  edit_shard(path, 2, [](std::vector<unsigned char>& raw) {  // under a valid header CRC: the size check must see it
    const uint64_t wrapped = (uint64_t(1) << 63) + 4;  // * 2 bytes = 8 mod 2^64: the real size of 4 tokens
    std::memcpy(&raw[24], &wrapped, 8);
  });
  try {
    io::Shard bad(path, /*verify_checksum=*/false);
    FAIL() << "a wrapped token count was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("truncated or padded"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

// Found by tests/fuzz/fuzz_options (regression case percent_value_placeholder_hangs_boost): Boost's error
// message loops forever substituting a "%value%" that the offending value itself contains. The error is one
// line naming the word instead.
TEST(Options, PercentPlaceholderInABadValueIsAnErrorNotAHang) {
  namespace po = boost::program_options;
  int64_t steps = 0;
  po::options_description desc("test");
  desc.add_options()("steps", po::value(&steps), "steps")("config", po::value<std::string>(), "ini file");
  std::vector<std::string> words = {"sinklab-test", "--steps=3%value%"};
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  po::variables_map vm;
  try {
    parse_options(int(argv.size()), argv.data(), desc, vm);
    FAIL() << "a bad --steps was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'--steps=3%value%'"), std::string::npos) << e.what();
  }
  // The same value in an ini file: the error names the file and the line.
  const std::string ini = temp_path("percent.ini");
  std::ofstream(ini) << "# 5% of the budget\nsteps = %value%\n";
  std::vector<std::string> words2 = {"sinklab-test", "--config", ini};
  std::vector<char*> argv2;
  for (std::string& w : words2) argv2.push_back(w.data());
  po::variables_map vm2;
  try {
    parse_options(int(argv2.size()), argv2.data(), desc, vm2);
    FAIL() << "a bad steps line was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(ini + ": cannot parse the options (at or before line 2"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace sinklab
