// SHA-256 against the test vectors of FIPS 180-4 (NIST's example messages) and a file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "io/sha256.hpp"

namespace sinklab::io {
namespace {

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu"),
            "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  // One million 'a', fed in uneven pieces.
  Sha256 h;
  const std::string piece(997, 'a');
  size_t left = 1000000;
  while (left > 0) {
    const size_t n = std::min(left, piece.size());
    h.update(piece.data(), n);
    left -= n;
  }
  EXPECT_EQ(h.hex_digest(), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  EXPECT_THROW(h.update("x"), Error);
}

TEST(Sha256, EveryPaddingLength) {
  // Messages of 0..130 bytes cross the 55/56/64-byte padding boundaries; piecewise == at once.
  std::string msg;
  for (int n = 0; n <= 130; ++n) {
    Sha256 a;
    for (char c : msg) a.update(&c, 1);
    EXPECT_EQ(a.hex_digest(), sha256_hex(msg)) << n;
    msg.push_back(char('a' + n % 26));
  }
  EXPECT_EQ(sha256_hex(std::string(55, 'x')).size(), 64u);
}

TEST(Sha256, File) {
  const std::string path = std::filesystem::temp_directory_path() / ("sinklab_sha256_" + std::to_string(::getpid()));
  std::ofstream(path, std::ios::binary) << "abc";
  EXPECT_EQ(sha256_file(path), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  std::filesystem::remove(path);
  try {
    sha256_file(path);
    ADD_FAILURE() << "a missing file was hashed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos);
  }
}

}  // namespace
}  // namespace sinklab::io
