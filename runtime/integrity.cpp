//===- integrity.cpp - the hashes that tie a package together -------------===//
//
// SHA-256 is written out here rather than taken from a library: the runtime
// must build on a GPU server with only a C++ compiler, the CUDA headers and
// nlohmann-json, and liblinac.so should not pull OpenSSL's libcrypto (whose
// soname differs between distributions) into every process that loads it
// for one hash at package open. The tests check it against FIPS 180-4's
// vectors.
//
//===----------------------------------------------------------------------===//

#include "linac/integrity.h"
#include "linac/package.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>

namespace linac {

namespace {

constexpr uint32_t kRoundConstants[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1,
    0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3,
    0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
    0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147,
    0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
    0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208,
    0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

uint32_t rotateRight(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

/// Folds one 64-byte block into the hash state.
void compress(uint32_t state[8], const unsigned char *block) {
  uint32_t w[64];
  for (int i = 0; i < 16; ++i)
    w[i] = uint32_t(block[4 * i]) << 24 | uint32_t(block[4 * i + 1]) << 16 |
           uint32_t(block[4 * i + 2]) << 8 | uint32_t(block[4 * i + 3]);
  for (int i = 16; i < 64; ++i) {
    uint32_t s0 = rotateRight(w[i - 15], 7) ^ rotateRight(w[i - 15], 18) ^
                  (w[i - 15] >> 3);
    uint32_t s1 = rotateRight(w[i - 2], 17) ^ rotateRight(w[i - 2], 19) ^
                  (w[i - 2] >> 10);
    w[i] = w[i - 16] + s0 + w[i - 7] + s1;
  }
  uint32_t a = state[0], b = state[1], c = state[2], d = state[3], e = state[4],
           f = state[5], g = state[6], h = state[7];
  for (int i = 0; i < 64; ++i) {
    uint32_t s1 = rotateRight(e, 6) ^ rotateRight(e, 11) ^ rotateRight(e, 25);
    uint32_t choice = (e & f) ^ (~e & g);
    uint32_t t1 = h + s1 + choice + kRoundConstants[i] + w[i];
    uint32_t s0 = rotateRight(a, 2) ^ rotateRight(a, 13) ^ rotateRight(a, 22);
    uint32_t majority = (a & b) ^ (a & c) ^ (b & c);
    h = g;
    g = f;
    f = e;
    e = d + t1;
    d = c;
    c = b;
    b = a;
    a = t1 + s0 + majority;
  }
  uint32_t add[8] = {a, b, c, d, e, f, g, h};
  for (int i = 0; i < 8; ++i)
    state[i] += add[i];
}

} // namespace

std::string sha256Hex(std::string_view bytes) {
  uint32_t state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto data = reinterpret_cast<const unsigned char *>(bytes.data());
  size_t whole = bytes.size() / 64 * 64;
  for (size_t i = 0; i < whole; i += 64)
    compress(state, data + i);
  // The rest, a 1 bit, zeros, and the message's length in bits, big-endian,
  // filling one block or two.
  unsigned char tail[128] = {};
  size_t rest = bytes.size() - whole;
  std::memcpy(tail, data + whole, rest);
  tail[rest] = 0x80;
  size_t tailSize = rest + 1 + 8 <= 64 ? 64 : 128;
  uint64_t bits = uint64_t(bytes.size()) * 8;
  for (int i = 0; i < 8; ++i)
    tail[tailSize - 1 - i] = static_cast<unsigned char>(bits >> (8 * i));
  for (size_t i = 0; i < tailSize; i += 64)
    compress(state, tail + i);

  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  for (uint32_t word : state)
    for (int shift = 28; shift >= 0; shift -= 4)
      hex += kHex[(word >> shift) & 0xf];
  return hex;
}

std::string contractHash(const std::string &manifestText) {
  nlohmann::json manifest = nlohmann::json::parse(manifestText, nullptr,
                                                  /*allow_exceptions=*/false);
  if (!manifest.is_object())
    throw Error(Error::Kind::Package, "a manifest is a JSON object");
  manifest.erase("integrity");
  // nlohmann's objects keep their keys sorted; dump() writes no spaces.
  return sha256Hex(manifest.dump());
}

} // namespace linac
