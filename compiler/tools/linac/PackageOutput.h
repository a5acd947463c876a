//===- PackageOutput.h - where `linac compile` puts a package ---*- C++ -*-===//
//
// A package is staged in a private directory beside its destination and
// swapped into place in one rename, so that a reader sees the old package
// or the new one, never half of either. Nothing linac did not write is
// replaced without --force, and a signal that ends the compiler removes
// what it was staging.
//
//===----------------------------------------------------------------------===//

#ifndef LINAC_TOOLS_PACKAGEOUTPUT_H
#define LINAC_TOOLS_PACKAGEOUTPUT_H

#include <string>

namespace linac::output {

/// Installs handlers for SIGINT, SIGTERM and SIGHUP that remove every
/// registered temporary, then die of the signal as they would have.
void removeTemporariesOnSignal();

/// A path removed (recursively) by the signal handlers until released.
class Temporary {
public:
  explicit Temporary(std::string path);
  ~Temporary();
  Temporary(const Temporary &) = delete;
  Temporary &operator=(const Temporary &) = delete;
  const std::string &path() const { return path_; }
  /// The path no longer needs removing (it was renamed into place).
  void release();

private:
  std::string path_;
  int slot_;
};

/// Why `out` may not receive a package, or "" when it may: it is absent,
/// or a package linac wrote (a directory of package files alone), or
/// `force` is set. The current directory and its ancestors never may.
std::string refusal(const std::string &out, bool force);

/// Creates a private directory beside `out` to stage the package in.
/// Returns "" and sets `error` on failure.
std::string createStaging(const std::string &out, std::string &error);

/// Puts the staged package at `out` in one rename, exchanging it with what
/// is there (then removed); returns "" or the reason it could not.
std::string install(Temporary &staging, const std::string &out);

} // namespace linac::output

#endif // LINAC_TOOLS_PACKAGEOUTPUT_H
