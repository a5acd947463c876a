//===- PackageOutput.cpp - where `linac compile` puts a package -----------===//

#include "PackageOutput.h"
#include "linac/manifest.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace fs = llvm::sys::fs;
namespace path = llvm::sys::path;

namespace linac::output {
namespace {

/// The files a package holds; a directory of these alone is one linac wrote.
constexpr const char *kPackageFiles[] = {"manifest.json",     "layer.mlir",
                                         "layer.cpp",         "layer.so",
                                         "layer.avx2_fma.so", "layer.cu"};

/// Whether `name` is a file the compiler writes into a package.
bool isPackageFile(llvm::StringRef name) {
  if (llvm::is_contained(kPackageFiles, name))
    return true;
  for (int part = 0; part < linac::manifest::kCudaKernelParts; ++part)
    if (name == linac::manifest::cudaKernelFile(part))
      return true;
  return false;
}

/// Registered temporaries, strdup'ed; the handler only reads them.
constexpr int kSlots = 8;
std::atomic<char *> slots[kSlots];

/// Removes `path` and, if a directory, everything under it. Called from the
/// signal handler too: it uses only system calls, but opendir may allocate,
/// which a process that is about to die of its signal can afford.
void removeTree(const char *path) {
  struct stat info;
  if (lstat(path, &info) != 0)
    return;
  if (!S_ISDIR(info.st_mode)) {
    unlink(path);
    return;
  }
  if (DIR *dir = opendir(path)) {
    while (struct dirent *entry = readdir(dir)) {
      if (!strcmp(entry->d_name, ".") || !strcmp(entry->d_name, ".."))
        continue;
      char child[PATH_MAX];
      if (snprintf(child, sizeof child, "%s/%s", path, entry->d_name) <
          int(sizeof child))
        removeTree(child);
    }
    closedir(dir);
  }
  rmdir(path);
}

void onSignal(int signal) {
  for (std::atomic<char *> &slot : slots)
    if (char *path = slot.load())
      removeTree(path);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

std::string realPath(const std::string &p) {
  llvm::SmallString<256> real;
  if (fs::real_path(p, real))
    return "";
  return real.str().str();
}

bool isPackage(const std::string &dir) {
  if (!fs::is_regular_file(dir + "/manifest.json"))
    return false;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec, /*follow_symlinks=*/false), end;
       it != end && !ec; it.increment(ec)) {
    llvm::StringRef name = path::filename(it->path());
    if (it->type() != fs::file_type::regular_file || !isPackageFile(name))
      return false;
  }
  return !ec;
}

/// rename(2) with renameat2's flags: RENAME_NOREPLACE (1) or
/// RENAME_EXCHANGE (2).
int renameWith(const std::string &from, const std::string &to,
               unsigned flags) {
  return renameat2(AT_FDCWD, from.c_str(), AT_FDCWD, to.c_str(), flags);
}

} // namespace

void removeTemporariesOnSignal() {
  struct sigaction action = {};
  action.sa_handler = onSignal;
  sigemptyset(&action.sa_mask);
  for (int signal : {SIGINT, SIGTERM, SIGHUP})
    sigaction(signal, &action, nullptr);
}

Temporary::Temporary(std::string path) : path_(std::move(path)), slot_(-1) {
  for (int i = 0; i < kSlots; ++i) {
    char *expected = nullptr;
    char *copy = strdup(path_.c_str());
    if (slots[i].compare_exchange_strong(expected, copy)) {
      slot_ = i;
      return;
    }
    free(copy);
  }
}

Temporary::~Temporary() {
  if (slot_ < 0)
    return;
  removeTree(path_.c_str());
  release();
}

void Temporary::release() {
  if (slot_ < 0)
    return;
  free(slots[slot_].exchange(nullptr));
  slot_ = -1;
}

std::string refusal(const std::string &out, bool force) {
  fs::file_status status;
  if (fs::status(out, status, /*follow=*/false) ||
      status.type() == fs::file_type::file_not_found)
    return "";
  std::string real = realPath(out), cwd = realPath(".");
  if (!real.empty() && !cwd.empty() &&
      (cwd == real || llvm::StringRef(cwd).starts_with(real + "/")))
    return out + " is the current directory or holds it; a package needs a "
                 "path of its own";
  if (force || (status.type() == fs::file_type::directory_file && isPackage(out)))
    return "";
  return out + " exists and is not a linac package; pass another -o, or "
               "--force to replace it";
}

std::string createStaging(const std::string &out, std::string &error) {
  llvm::StringRef parent = path::parent_path(out);
  if (!parent.empty())
    if (std::error_code ec = fs::create_directories(parent)) {
      error = "cannot create " + parent.str() + ": " + ec.message();
      return "";
    }
  // createUniqueDirectory puts a relative prefix in the temporary directory.
  llvm::SmallString<256> prefix(out + ".tmp"), staging;
  fs::make_absolute(prefix);
  if (std::error_code ec = fs::createUniqueDirectory(prefix, staging)) {
    error = "cannot create a directory beside " + out + ": " + ec.message();
    return "";
  }
  return staging.str().str();
}

std::string install(Temporary &staging, const std::string &out) {
  if (renameWith(staging.path(), out, RENAME_NOREPLACE) == 0) {
    staging.release();
    return "";
  }
  if (errno == EEXIST && renameWith(staging.path(), out, RENAME_EXCHANGE) == 0)
    return ""; // The staging path now holds the old package, which goes.
  if (errno != EINVAL && errno != ENOSYS)
    return "cannot move the package into " + out + ": " + strerror(errno);
  // A file system without renameat2's flags: move the old one aside first.
  llvm::SmallString<256> aside;
  fs::createUniquePath(out + ".old-%%%%%%", aside, /*MakeAbsolute=*/false);
  Temporary old(aside.str().str());
  if (::rename(out.c_str(), old.path().c_str()) != 0 && errno != ENOENT)
    return "cannot move the old package aside: " + std::string(strerror(errno));
  if (::rename(staging.path().c_str(), out.c_str()) != 0)
    return "cannot move the package into " + out + ": " + strerror(errno);
  staging.release();
  return "";
}

} // namespace linac::output
