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

/// SHA-256 (FIPS 180-4) of `bytes`, as 64 lowercase hex digits.
std::string sha256Hex(std::string_view bytes);

/// The hash of a manifest's contract: the SHA-256 of the manifest without
/// its "integrity" member, as compact JSON with sorted keys, so that the
/// hash does not depend on how the file is laid out. Throws Error (kind
/// Package) for text that is not a JSON object.
std::string contractHash(const std::string &manifestText);

} // namespace linac

#endif // LINAC_INTEGRITY_H
