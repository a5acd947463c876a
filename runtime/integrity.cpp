//===- integrity.cpp - the hashes that tie a package together -------------===//
//
// SHA-256 is written out here rather than taken from a library: the runtime
// must build on a GPU server with only a C++ compiler, the CUDA headers and
// nlohmann-json, and liblinac.so should not pull OpenSSL's libcrypto (whose
// soname differs between distributions) into every process that loads it
// for one hash at package open. Where the CPU has the x86 SHA extensions the
// blocks go through them: a package open hashes its kernel file, megabytes
// for a cubin, and the portable rounds hash about 300 MB/s. The tests check
// both against FIPS 180-4's vectors and against each other.
//
//===----------------------------------------------------------------------===//

#include "linac/integrity.h"
#include "linac/package.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LINAC_SHA_EXTENSIONS 1
#include <cpuid.h>
#include <immintrin.h>
#endif

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
void compressPortable(uint32_t state[8], const unsigned char *block) {
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

/// Folds `blocks` 64-byte blocks into the hash state, one at a time.
void compressBlocksPortable(uint32_t state[8], const unsigned char *data,
                            size_t blocks) {
  for (size_t i = 0; i < blocks; ++i)
    compressPortable(state, data + 64 * i);
}

#if LINAC_SHA_EXTENSIONS
/// The same through the SHA extensions. sha256rnds2 keeps the working
/// variables as (a, b, e, f) and (c, d, g, h), lane 3 first, and does two
/// rounds; sha256msg1 and sha256msg2 extend the message four words at a
/// time.
__attribute__((target("sha,sse4.1"))) void
compressBlocksWithShaExtensions(uint32_t state[8], const unsigned char *data,
                                size_t blocks) {
  // Lanes (d, c, b, a) and (h, g, f, e) from memory, to (a, b, e, f) and
  // (c, d, g, h).
  __m128i low = _mm_loadu_si128(reinterpret_cast<const __m128i *>(state));
  __m128i high = _mm_loadu_si128(reinterpret_cast<const __m128i *>(state + 4));
  low = _mm_shuffle_epi32(low, 0xB1);   // c d a b
  high = _mm_shuffle_epi32(high, 0x1B); // e f g h
  __m128i abef = _mm_alignr_epi8(low, high, 8);
  __m128i cdgh = _mm_blend_epi16(high, low, 0xF0);
  // The message's words are big-endian.
  const __m128i byteSwap =
      _mm_set_epi8(12, 13, 14, 15, 8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3);
  for (size_t b = 0; b < blocks; ++b) {
    const unsigned char *block = data + 64 * b;
    __m128i abefBefore = abef, cdghBefore = cdgh;
    // words[g % 4] holds the message's words 4g to 4g + 3 while rounds 4g
    // to 4g + 3 run: the last four groups, all that the next one reads.
    __m128i words[4];
    // Unrolled, the groups' indices are constants and stay in registers.
#pragma GCC unroll 16
    for (int g = 0; g < 16; ++g) {
      __m128i &group = words[g % 4];
      if (g < 4) {
        group = _mm_shuffle_epi8(
            _mm_loadu_si128(reinterpret_cast<const __m128i *>(block + 16 * g)),
            byteSwap);
      } else {
        const __m128i &minus12 = words[(g + 1) % 4];
        const __m128i &minus8 = words[(g + 2) % 4];
        const __m128i &minus4 = words[(g + 3) % 4];
        __m128i next = _mm_add_epi32(_mm_sha256msg1_epu32(group, minus12),
                                     _mm_alignr_epi8(minus4, minus8, 4));
        group = _mm_sha256msg2_epu32(next, minus4);
      }
      __m128i input = _mm_add_epi32(
          group, _mm_loadu_si128(reinterpret_cast<const __m128i *>(
                     kRoundConstants + 4 * g)));
      cdgh = _mm_sha256rnds2_epu32(cdgh, abef, input);
      abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(input, 0x0E));
    }
    abef = _mm_add_epi32(abef, abefBefore);
    cdgh = _mm_add_epi32(cdgh, cdghBefore);
  }
  // Back to (d, c, b, a) and (h, g, f, e).
  __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
  __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state),
                   _mm_blend_epi16(feba, dchg, 0xF0));
  _mm_storeu_si128(reinterpret_cast<__m128i *>(state + 4),
                   _mm_alignr_epi8(dchg, feba, 8));
}
#endif

using CompressBlocks = void (*)(uint32_t *, const unsigned char *, size_t);

CompressBlocks compressBlocks(Sha256Engine engine) {
#if LINAC_SHA_EXTENSIONS
  if (engine == Sha256Engine::Fastest && hasShaInstructions())
    return compressBlocksWithShaExtensions;
#endif
  return compressBlocksPortable;
}

} // namespace

bool hasShaInstructions() {
#if LINAC_SHA_EXTENSIONS
  static const bool has = [] {
    unsigned eax, ebx, ecx, edx;
    // Leaf 1: SSSE3 (ecx bit 9), SSE4.1 (ecx bit 19); leaf 7: SHA (ebx
    // bit 29).
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx) || !(ecx & (1u << 9)) ||
        !(ecx & (1u << 19)))
      return false;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) &&
           (ebx & (1u << 29));
  }();
  return has;
#else
  return false;
#endif
}

std::string sha256Hex(std::string_view bytes, Sha256Engine engine) {
  uint32_t state[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                       0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto data = reinterpret_cast<const unsigned char *>(bytes.data());
  size_t whole = bytes.size() / 64 * 64;
  CompressBlocks compress = compressBlocks(engine);
  compress(state, data, whole / 64);
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
  compress(state, tail, tailSize / 64);

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
