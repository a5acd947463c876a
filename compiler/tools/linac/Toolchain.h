//===- Toolchain.h - from generated source to a kernel file -----*- C++ -*-===//
//
// `linac compile` builds a cpu package's layer.so with the host compiler and
// a GPU package's layer.cubin with nvcc, and caches kernel files by a hash
// of everything they depend on.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_TOOLS_TOOLCHAIN_H
#define LINAC_TOOLS_TOOLCHAIN_H

#include "linac/manifest.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>
#include <vector>

namespace linac::toolchain {

/// A CPU kernel file built for more instructions than the baseline's,
/// beside the baseline's own.
struct IsaVariant {
  manifest::CpuIsa isa;
  std::string kernel; ///< its file name inside the package
  std::vector<std::string> flags, libraries;
};

/// How a target's generated source becomes its kernel file.
struct Toolchain {
  std::string program; ///< the compiler's path
  std::vector<std::string> flags;
  /// Given only where the kernel file is linked (cpu's shared object).
  std::vector<std::string> linkFlags;
  /// File names inside the package: the generated source and a CPU
  /// package's kernel file (a GPU package's are manifest::cudaKernelFile's).
  std::string source, kernel;
  /// Linked after the source: the CPU products' archive.
  std::vector<std::string> libraries;
  /// Kernel files of the same source for richer instruction sets (cpu on
  /// x86-64 hosts).
  std::vector<IsaVariant> isaVariants;
  /// Whether the source's first include may be precompiled (cpu, with GCC).
  bool precompiledHeaders = false;
};

/// The host compiler (CXX, default c++) for cpu, nvcc (NVCC, else on the
/// PATH or in /usr/local/cuda/bin) for sm_90a and sm_80; or sets `error`.
std::optional<Toolchain> find(llvm::StringRef target, std::string &error);

/// A kernel file to build: its path and the flags it takes beyond the
/// toolchain's.
struct KernelBuild {
  std::string kernel;
  std::vector<std::string> flags, libraries;
};

/// Compiles the file `source`, whose text is `sourceText`, into each of
/// `builds`' kernel files, side by side, or copies the kernel an earlier
/// compilation of the same text with the same toolchain, flags and templates
/// left in the cache (LINAC_CACHE_DIR, else $XDG_CACHE_HOME/linac or
/// ~/.cache/linac). Cache entries are written under a private name and
/// renamed, so processes compiling the same spec at once never see a
/// partial file. With `precompiledHeaders` and GCC, the header the source
/// includes first is precompiled into the cache for each build's flags
/// and taken from there. Returns false and sets `error` on failure.
bool build(const Toolchain &tools, llvm::StringRef source,
           llvm::ArrayRef<KernelBuild> builds, llvm::StringRef sourceText,
           std::string &error);

/// A file's bytes, or "" where it cannot be read.
std::string readFile(const std::string &path);

} // namespace linac::toolchain

#endif // LINAC_TOOLS_TOOLCHAIN_H
