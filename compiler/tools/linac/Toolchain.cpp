//===- Toolchain.cpp - from generated source to a kernel file -------------===//

#include "Toolchain.h"
#include "PackageOutput.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SHA256.h"

#include <fmt/format.h>

#include <cstdlib>
#include <memory>
#include <unistd.h>

using namespace linac;
using llvm::SmallString;
using llvm::SmallVector;
using llvm::StringRef;
using toolchain::KernelBuild;
using toolchain::readFile;
using toolchain::Toolchain;
namespace fs = llvm::sys::fs;

/// The templates the generated source includes.
static std::string templatesDir() {
  if (const char *dir = std::getenv("LINAC_TEMPLATES"))
    return dir;
  return LINAC_TEMPLATES_DIR;
}

/// The CPU packages' products, one archive per instruction set
/// (templates/CMakeLists.txt).
static std::string productsArchive(StringRef isa) {
  const char *dir = std::getenv("LINAC_CPU_PRODUCTS");
  return fmt::format("{}/liblinac_cpu_products_{}.a",
                     dir ? dir : LINAC_CPU_PRODUCTS_DIR, isa.str());
}

/// The flags of an instruction set as the build gives them: one string,
/// space-separated.
static std::vector<std::string> splitFlags(StringRef text) {
  llvm::SmallVector<StringRef> parts;
  text.split(parts, ' ', -1, /*KeepEmpty=*/false);
  return {parts.begin(), parts.end()};
}

std::optional<Toolchain> toolchain::find(StringRef target,
                                        std::string &error) {
  Toolchain tools;
  std::string include = "-I" + templatesDir();
  const char *override = std::getenv(target == "cpu" ? "CXX" : "NVCC");
  StringRef name = override ? override : target == "cpu" ? "c++" : "nvcc";
  if (name.contains('/') && !fs::can_execute(name)) {
    error = fmt::format("{} (from {}) is not an executable", name.str(),
                        target == "cpu" ? "CXX" : "NVCC");
    return std::nullopt;
  }
  llvm::ErrorOr<std::string> program = llvm::sys::findProgramByName(name);
  if (!program && target != "cpu")
    program = llvm::sys::findProgramByName(name, {"/usr/local/cuda/bin"});
  if (!program) {
    error = target == "cpu" ? "no host C++ compiler found (set CXX)"
                            : "no nvcc found on PATH or in /usr/local/cuda/bin "
                              "(set NVCC)";
    return std::nullopt;
  }
  tools.program = *program;
  if (target == "cpu") {
    tools.flags = {"-std=c++17", "-O3", "-fPIC", "-pthread", include};
    tools.linkFlags = {"-shared", "-Wl,--version-script=" + templatesDir() +
                                      "/linac/cpu/exports.map"};
    for (std::string &flag : splitFlags(LINAC_CPU_TUNE_FLAGS))
      tools.flags.push_back(std::move(flag));
    tools.source = "layer.cpp";
    tools.kernel = "layer.so";
    tools.libraries = {productsArchive("baseline")};
    tools.precompiledHeaders = true;
#if defined(LINAC_CPU_ISA_FLAGS_AVX2_FMA)
    // The products run Eigen's kernels at the width the file is built for:
    // SSE2 in the baseline, 8 lanes and fused multiply-adds here.
    tools.isaVariants.push_back({manifest::CpuIsa::Avx2Fma,
                                 "layer.avx2_fma.so",
                                 splitFlags(LINAC_CPU_ISA_FLAGS_AVX2_FMA),
                                 {productsArchive("avx2_fma")}});
#endif
  } else {
    // The a-suffixed targets need -gencode: -arch=sm_90a also runs a plain
    // sm_90 pass.
    std::string arch = target.drop_front(3).str();
    // 177: the Layer's constants the CUDA templates leave unread.
    tools.flags = {"-std=c++17",
                   "-O3",
                   "-cubin",
                   "-diag-suppress=177",
                   fmt::format("-gencode=arch=compute_{0},code=sm_{0}", arch),
                   include};
    tools.source = "layer.cu";
  }
  return tools;
}

/// Runs `program args...` with its output to the file `capture`, returning
/// its exit status.
static int execute(const std::string &program,
                   const std::vector<std::string> &args, std::string &error,
                   StringRef capture) {
  SmallVector<StringRef> argv{program};
  for (const std::string &arg : args)
    argv.push_back(arg);
  std::optional<StringRef> redirects[] = {std::nullopt, capture, capture};
  return llvm::sys::ExecuteAndWait(program, argv, std::nullopt, redirects, 0,
                                   0, &error);
}

std::string toolchain::readFile(const std::string &path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  return buffer ? (*buffer)->getBuffer().str() : std::string();
}

/// What the compiler says of itself (`--version`).
static std::string compilerVersion(const Toolchain &tools) {
  SmallString<128> versionFile;
  if (fs::createTemporaryFile("linac-version", "txt", versionFile))
    return "";
  linac::output::Temporary temporary(versionFile.str().str());
  std::string error;
  execute(tools.program, {"--version"}, error, versionFile);
  return readFile(temporary.path());
}

/// Everything a kernel file depends on besides the spec: the templates'
/// text, the toolchain's flags and its own version.
static std::string toolchainFingerprint(const Toolchain &tools,
                                        StringRef version) {
  std::string text = tools.program;
  for (const auto *flags : {&tools.flags, &tools.linkFlags})
    for (const std::string &flag : *flags)
      text += " " + flag;
  text += version;
  std::vector<std::string> templates;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(templatesDir(), ec), end;
       it != end && !ec; it.increment(ec))
    if (it->type() == fs::file_type::regular_file)
      templates.push_back(it->path());
  llvm::sort(templates);
  for (const std::string &path : templates)
    text += path + readFile(path);
  return text;
}

/// A file's path and the SHA-256 of its bytes, for a cache key.
static std::string fileKey(const std::string &path) {
  return path + " " +
         llvm::toHex(llvm::SHA256::hash(
                         llvm::arrayRefFromStringRef(readFile(path))),
                     true);
}

static std::string cacheDir() {
  if (const char *dir = std::getenv("LINAC_CACHE_DIR"))
    return dir;
  SmallString<128> path;
  if (const char *xdg = std::getenv("XDG_CACHE_HOME"))
    path = xdg;
  else if (!llvm::sys::path::home_directory(path))
    return "";
  else
    llvm::sys::path::append(path, ".cache");
  llvm::sys::path::append(path, "linac");
  return path.str().str();
}

/// What a kernel build's flags and libraries add to its cache key.
static std::string buildKey(const KernelBuild &build) {
  std::string key;
  for (const std::string &flag : build.flags)
    key += " " + flag;
  for (const std::string &library : build.libraries)
    key += " " + fileKey(library);
  return key;
}

/// The header the generated source includes first: the one a compiler may
/// take precompiled. "" when there is none.
static StringRef firstInclude(StringRef sourceText) {
  for (StringRef line : llvm::split(sourceText, '\n'))
    if (line.consume_front("#include \""))
      return line.take_until([](char c) { return c == '"'; });
  return "";
}

namespace {
/// A kernel file the cache lacks.
struct Pending {
  const KernelBuild *build;
  std::string cached;       ///< its cache entry, or "" without a cache
  std::string headerSearch; ///< a directory of precompiled headers, or ""
};
} // namespace

/// GCC takes a header precompiled with the same compiler and flags in place
/// of the source's first #include, when it finds HEADER.gch in an include
/// directory searched before the header's own. Parsing the CPU templates is
/// a quarter of compiling a package's file or more, so each is precompiled once
/// per header, flags and fingerprint into the cache (pch-KEY/HEADER.gch,
/// staged and renamed like kernel files), all of `pending` at once. One that
/// fails to build is left out: its kernel file then parses the header.
static void precompileHeaders(const Toolchain &tools, StringRef fingerprint,
                              const std::string &cache, StringRef header,
                              std::vector<Pending> &pending) {
  struct Running {
    Pending *kernel;
    std::string directory;
    std::unique_ptr<linac::output::Temporary> staging;
    llvm::sys::ProcessInfo process;
  };
  std::vector<Running> running;
  for (Pending &kernel : pending) {
    std::string key = llvm::toHex(
        llvm::SHA256::hash(llvm::arrayRefFromStringRef(
            fingerprint.str() + buildKey(*kernel.build) + "\n" + header.str())),
        true);
    std::string directory = cache + "/pch-" + key;
    if (fs::exists(directory + "/" + header.str() + ".gch")) {
      kernel.headerSearch = directory;
      continue;
    }
    auto staging = std::make_unique<linac::output::Temporary>(
        fmt::format("{}.tmp{}", directory, getpid()));
    std::string output = staging->path() + "/" + header.str() + ".gch";
    if (fs::create_directories(llvm::sys::path::parent_path(output)))
      continue;
    SmallVector<StringRef> argv{tools.program};
    for (const std::string &arg : tools.flags)
      argv.push_back(arg);
    for (const std::string &arg : kernel.build->flags)
      argv.push_back(arg);
    std::string input = templatesDir() + "/" + header.str();
    for (StringRef arg : {StringRef("-x"), StringRef("c++-header"),
                          StringRef(input), StringRef("-o"), StringRef(output)})
      argv.push_back(arg);
    std::optional<StringRef> quiet[] = {StringRef(""), StringRef(""),
                                        StringRef("")};
    llvm::sys::ProcessInfo process =
        llvm::sys::ExecuteNoWait(tools.program, argv, std::nullopt, quiet);
    if (process.Pid != llvm::sys::ProcessInfo::InvalidPid)
      running.push_back({&kernel, directory, std::move(staging), process});
  }
  for (Running &run : running) {
    if (llvm::sys::Wait(run.process, std::nullopt).ReturnCode != 0)
      continue;
    // Another process may have renamed its own copy into place first.
    if (!fs::rename(run.staging->path(), run.directory))
      run.staging->release();
    if (fs::exists(run.directory))
      run.kernel->headerSearch = run.directory;
  }
}

bool toolchain::build(const Toolchain &tools, StringRef source,
                      llvm::ArrayRef<KernelBuild> builds, StringRef sourceText,
                      std::string &error) {
  std::string version = compilerVersion(tools);
  std::string fingerprint = toolchainFingerprint(tools, version);
  std::string cache = cacheDir();
  std::vector<Pending> pending;
  for (const KernelBuild &build : builds) {
    std::string key = llvm::toHex(
        llvm::SHA256::hash(llvm::arrayRefFromStringRef(
            fingerprint + buildKey(build) + "\n" + sourceText.str())),
        true);
    std::string cached = cache.empty() ? "" : cache + "/" + key;
    if (!cached.empty() && fs::exists(cached) &&
        !fs::copy_file(cached, build.kernel))
      continue;
    pending.push_back({&build, cached, ""});
  }
  // Only GCC looks for precompiled headers along the include path.
  StringRef header = firstInclude(sourceText);
  if (tools.precompiledHeaders && !cache.empty() && !header.empty() &&
      StringRef(version).contains("Free Software Foundation"))
    precompileHeaders(tools, fingerprint, cache, header, pending);
  struct Running {
    const Pending *kernel;
    llvm::sys::ProcessInfo process;
  };
  std::vector<Running> running;
  // Every file the cache lacks is compiled at once, one process each.
  for (const Pending &kernel : pending) {
    const KernelBuild &build = *kernel.build;
    std::string headerSearch = "-I" + kernel.headerSearch;
    SmallVector<StringRef> argv{tools.program};
    if (!kernel.headerSearch.empty())
      argv.push_back(headerSearch);
    for (const std::string &arg : tools.flags)
      argv.push_back(arg);
    for (const std::string &arg : build.flags)
      argv.push_back(arg);
    argv.push_back(source);
    for (const std::string &library : build.libraries)
      argv.push_back(library);
    for (const std::string &arg : tools.linkFlags)
      argv.push_back(arg);
    for (StringRef arg : {StringRef("-o"), StringRef(build.kernel)})
      argv.push_back(arg);
    std::string why;
    llvm::sys::ProcessInfo process =
        llvm::sys::ExecuteNoWait(tools.program, argv, std::nullopt, {}, 0, &why);
    if (process.Pid == llvm::sys::ProcessInfo::InvalidPid) {
      error = fmt::format("cannot run {}: {}", tools.program, why);
      return false;
    }
    running.push_back({&kernel, process});
  }
  bool built = true;
  for (Running &run : running) {
    std::string why;
    llvm::sys::ProcessInfo done =
        llvm::sys::Wait(run.process, std::nullopt, &why);
    if (done.ReturnCode != 0) {
      if (built)
        error = fmt::format("{} failed on {} {}", tools.program, source.str(),
                            why);
      built = false;
      continue;
    }
    const std::string &cached = run.kernel->cached;
    if (cached.empty() || fs::create_directories(cache))
      continue;
    linac::output::Temporary staging(fmt::format("{}.tmp{}", cached, getpid()));
    if (!fs::copy_file(run.kernel->build->kernel, staging.path()) &&
        !fs::rename(staging.path(), cached))
      staging.release();
  }
  return built;
}
