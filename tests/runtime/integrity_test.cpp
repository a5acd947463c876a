//===- integrity_test.cpp - the hashes that tie a package together --------===//

#include "linac/integrity.h"
#include "linac/package.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <string_view>

namespace {

// Both engines: the SHA extensions where the CPU has them, and the
// portable rounds.
constexpr linac::Sha256Engine kEngines[] = {linac::Sha256Engine::Fastest,
                                            linac::Sha256Engine::Portable};

TEST(Sha256, MatchesFips180Vectors) {
  for (linac::Sha256Engine engine : kEngines) {
    EXPECT_EQ(
        linac::sha256Hex("", engine),
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    EXPECT_EQ(
        linac::sha256Hex("abc", engine),
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    EXPECT_EQ(
        linac::sha256Hex(
            "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", engine),
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    EXPECT_EQ(
        linac::sha256Hex(std::string(1000000, 'a'), engine),
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
}

// The SHA extensions' rounds against the portable ones on random bytes of
// every length up to four blocks past a page, and on one of 3 MB.
TEST(Sha256, ShaExtensionsAgreeWithThePortableRounds) {
  if (!linac::hasShaInstructions())
    GTEST_SKIP() << "this CPU has no SHA extensions";
  std::mt19937 random(std::random_device{}());
  std::string bytes(3 << 20, '\0');
  for (char &byte : bytes)
    byte = static_cast<char>(random());
  for (size_t length = 0; length <= 4096 + 256; ++length)
    ASSERT_EQ(linac::sha256Hex(std::string_view(bytes).substr(0, length)),
              linac::sha256Hex(std::string_view(bytes).substr(0, length),
                               linac::Sha256Engine::Portable))
        << length << " bytes";
  EXPECT_EQ(linac::sha256Hex(bytes),
            linac::sha256Hex(bytes, linac::Sha256Engine::Portable));
}

// Lengths about the block boundaries, where the padding takes one block or
// two (digests from Python's hashlib).
TEST(Sha256, PadsAtBlockBoundaries) {
  struct Case {
    size_t length;
    const char *digest;
  };
  for (const Case &c : {
           Case{55, "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e91"
                    "0f734318"},
           Case{56, "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef797068"
                    "6ec6738a"},
           Case{63, "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da45"
                    "7ddc2f34"},
           Case{64, "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df"
                    "154668eb"},
           Case{65, "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f"
                    "17eb0ae0"},
           Case{119, "31eba51c313a5c08226adf18d4a359cfdfd8d2e816b13f4af952f7e"
                     "a6584dcfb"},
           Case{120, "2f3d335432c70b580af0e8e1b3674a7c020d683aa5f73aaaedfdc55"
                     "af904c21c"},
       })
    for (linac::Sha256Engine engine : kEngines)
      EXPECT_EQ(linac::sha256Hex(std::string(c.length, 'a'), engine), c.digest)
          << c.length << " bytes";
}

TEST(ContractHash, IgnoresLayoutAndTheIntegrityMember) {
  std::string compact = R"({"b":[1,2],"a":{"y":"z"}})";
  EXPECT_EQ(
      linac::contractHash(compact),
      linac::contractHash("{\n  \"a\": {\"y\": \"z\"},\n  \"b\": [1, 2]\n}"));
  EXPECT_EQ(linac::contractHash(compact),
            linac::contractHash(
                R"({"b":[1,2],"a":{"y":"z"},"integrity":{"contract":"x"}})"));
  EXPECT_EQ(linac::contractHash(compact),
            linac::sha256Hex(R"({"a":{"y":"z"},"b":[1,2]})"));
}

TEST(ContractHash, SeesEveryFieldAndItsOrderInLists) {
  std::string base = R"({"arguments":[{"name":"q"},{"name":"k"}]})";
  EXPECT_NE(
      linac::contractHash(base),
      linac::contractHash(R"({"arguments":[{"name":"k"},{"name":"q"}]})"));
  EXPECT_NE(linac::contractHash(base),
            linac::contractHash(R"({"arguments":[{"name":"q"}]})"));
  EXPECT_NE(linac::contractHash(base),
            linac::contractHash(
                R"({"arguments":[{"name":"q"},{"name":"k"}],"key_dim":16})"));
}

TEST(ContractHash, RefusesWhatIsNotAnObject) {
  for (const char *text : {"", "[1, 2]", "{\"a\": ", "null"})
    EXPECT_THROW(linac::contractHash(text), linac::Error) << text;
}

} // namespace
