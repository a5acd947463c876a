//===- integrity.h - the hashes that tie a package together -----*- C++ -*-===//
//
// The compiler and the runtime compute a package's hashes with these
// functions, so that both agree on them byte for byte (docs/runtime.md).
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_INTEGRITY_H
#define LINAC_INTEGRITY_H

#include <string>
#include <string_view>

namespace linac {

/// Which of sha256Hex's implementations runs: the fastest the CPU has (the
/// x86 SHA extensions where hasShaInstructions(), else portable C++), or the
/// portable one on any CPU (to test one against the other).
enum class Sha256Engine { Fastest, Portable };

/// Whether this CPU has the x86 SHA extensions (with SSSE3 and SSE4.1).
bool hasShaInstructions();

/// SHA-256 (FIPS 180-4) of `bytes`, as 64 lowercase hex digits.
std::string sha256Hex(std::string_view bytes,
                      Sha256Engine engine = Sha256Engine::Fastest);

/// The hash of a manifest's contract: the SHA-256 of the manifest without
/// its "integrity" member, as compact JSON with sorted keys, so that the
/// hash does not depend on how the file is laid out. Throws Error (kind
/// Package) for text that is not a JSON object.
std::string contractHash(const std::string &manifestText);

} // namespace linac

#endif // LINAC_INTEGRITY_H
