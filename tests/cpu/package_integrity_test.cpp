//===- package_integrity_test.cpp - broken packages, clean errors ---------===//
//
// Copies of freshly compiled packages with one thing broken: a library from
// another package, a truncated or changed library, a manifest edited after
// compilation. Opening each fails with a message that names the file and
// the field, before any of its code runs. Also `linac run` on .npy files
// that lie about their shapes, and a crash whose report cannot hang.
//
//===----------------------------------------------------------------------===//

#include "harness.h"
#include "linac/integrity.h"
#include "linac/npy.h"
#include "linac/runtime.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <sys/wait.h>

namespace fs = std::filesystem;
using namespace linac::harness;

namespace {

constexpr Dims kDims{16, 16};

fs::path workDir() {
  return fs::path(testing::TempDir()) / "linac_package_integrity";
}

fs::path example(const std::string &name) {
  return fs::path(LINAC_EXAMPLES_DIR) / (name + ".mlir");
}

std::string readText(const fs::path &path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void writeText(const fs::path &path, const std::string &text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

nlohmann::json manifestOf(const fs::path &package) {
  return nlohmann::json::parse(readText(package / "manifest.json"));
}

void writeManifest(const fs::path &package, const nlohmann::json &manifest) {
  writeText(package / "manifest.json", manifest.dump(2));
}

/// Recomputes integrity.contract from the manifest's fields, as someone
/// who edits a manifest and then its hash would.
void resealContract(const fs::path &package) {
  nlohmann::json manifest = manifestOf(package);
  manifest["integrity"]["contract"] = linac::contractHash(manifest.dump());
  writeManifest(package, manifest);
}

/// Records layer.so's size and hash in the manifest, as someone who copies
/// a library and then its hashes would.
void resealLibrary(const fs::path &package) {
  nlohmann::json manifest = manifestOf(package);
  std::string library = readText(package / "layer.so");
  manifest["integrity"]["files"]["layer.so"] = {
      {"bytes", library.size()}, {"sha256", linac::sha256Hex(library)}};
  writeManifest(package, manifest);
}

/// Runs `linac ARGS` with `environment` before it; returns its wait status
/// and writes its stderr to `errors`.
int runLinac(const std::string &args, std::string &errors,
             const std::string &environment = "") {
  fs::path log = workDir() / "linac.err";
  std::string command = environment + " " + LINAC_TOOL + " " + args + " 2> " +
                        log.string() + " > /dev/null";
  int status = std::system(command.c_str());
  errors = readText(log);
  return status;
}

class PackageIntegrity : public testing::Test {
protected:
  /// The tests change layer.so, so the runtime (and `linac` run from here)
  /// loads that file, not the AVX2 build beside it.
  void SetUp() override { setenv("LINAC_CPU_ISA", "baseline", 1); }
  void TearDown() override { unsetenv("LINAC_CPU_ISA"); }

  /// Linear attention: inputs q, k, v, no parameters.
  fs::path good = compiledPath(example("linear_attention"), kDims, workDir());

  /// A copy of `good` named after the test.
  fs::path copy(const std::string &suffix = "") {
    fs::path path =
        workDir() /
        (std::string(
             testing::UnitTest::GetInstance()->current_test_info()->name()) +
         suffix + ".linac");
    fs::remove_all(path);
    fs::copy(good, path);
    return path;
  }

  /// Replaces `package`'s library with the one compiled from `spec` at
  /// `dims`.
  static void replaceLibrary(const fs::path &package, const std::string &spec,
                             Dims dims) {
    fs::copy_file(compiledPath(example(spec), dims, workDir()) / "layer.so",
                  package / "layer.so", fs::copy_options::overwrite_existing);
  }

  /// Expects opening `package` to fail as a bad package with a message
  /// holding `message`.
  static void expectRefused(const fs::path &package,
                            const std::string &message) {
    linac_package *handle = nullptr;
    linac_status status = linac_package_open(package.c_str(), &handle);
    EXPECT_EQ(status, LINAC_ERROR_PACKAGE) << linac_last_error();
    if (status == LINAC_OK)
      linac_package_close(handle);
    EXPECT_NE(std::string(linac_last_error()).find(message), std::string::npos)
        << "expected: " << message << "\n got: " << linac_last_error();
  }

  /// q, k and v for `linac run`, [1, 8, 2, 16] each.
  static fs::path writeInputs(const std::string &name) {
    fs::path dir = workDir() / name;
    fs::create_directories(dir);
    for (const char *input : {"q", "k", "v"})
      linac::writeNpy((dir / (std::string(input) + ".npy")).string(),
                      linac::makeFloat32({1, 8, 2, 16},
                                         std::vector<float>(8 * 2 * 16, 0.5f)));
    return dir;
  }
};

TEST_F(PackageIntegrity, AFreshPackageOpens) {
  linac_package *handle = nullptr;
  ASSERT_EQ(linac_package_open(good.c_str(), &handle), LINAC_OK)
      << linac_last_error();
  linac_package_close(handle);
  nlohmann::json manifest = manifestOf(good);
  EXPECT_EQ(manifest["integrity"]["contract"],
            linac::contractHash(manifest.dump()));
  std::string library = readText(good / "layer.so");
  EXPECT_EQ(manifest["integrity"]["files"]["layer.so"]["sha256"],
            linac::sha256Hex(library));
  EXPECT_NE(library.find("linac-contract:" +
                         manifest["integrity"]["contract"].get<std::string>()),
            std::string::npos);
}

TEST_F(PackageIntegrity, LibraryOfOtherDimensions) {
  fs::path package = copy();
  replaceLibrary(package, "linear_attention", {32, 32});
  expectRefused(package, "layer.so has ");
  expectRefused(package, "integrity.files.layer.so.");
  std::string errors;
  int status = runLinac("run " + package.string() + " --inputs " +
                            writeInputs("other_dims_in").string() +
                            " --outputs " + (workDir() / "out").string(),
                        errors);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_NE(errors.find("layer.so has "), std::string::npos) << errors;

  // Its hashes copied as well: the library names another contract.
  resealLibrary(package);
  expectRefused(package, "layer.so does not carry the manifest's "
                         "integrity.contract");
}

TEST_F(PackageIntegrity, LibraryWithParameters) {
  fs::path package = copy();
  replaceLibrary(package, "gated_deltanet", kDims);
  expectRefused(package, "integrity.files.layer.so.");
  resealLibrary(package);
  expectRefused(package, "layer.so does not carry the manifest's "
                         "integrity.contract");
}

TEST_F(PackageIntegrity, LibraryWithTheSameArguments) {
  // RetNet has the same inputs q, k, v at the same dimensions.
  fs::path package = copy();
  replaceLibrary(package, "retnet", kDims);
  expectRefused(package, "integrity.files.layer.so.");
  resealLibrary(package);
  expectRefused(package, "layer.so does not carry the manifest's "
                         "integrity.contract");
}

TEST_F(PackageIntegrity, TruncatedLibrary) {
  fs::path package = copy();
  std::string library = readText(good / "layer.so");
  for (size_t size : {size_t(0), size_t(100), library.size() / 2}) {
    writeText(package / "layer.so", library.substr(0, size));
    expectRefused(package, "layer.so has " + std::to_string(size) +
                               " bytes, but integrity.files.layer.so.bytes "
                               "in manifest.json records " +
                               std::to_string(library.size()) +
                               " (truncated or replaced)");
  }
}

TEST_F(PackageIntegrity, ChangedLibrary) {
  fs::path package = copy();
  std::string library = readText(good / "layer.so");
  library[library.size() / 2] ^= 0x40;
  writeText(package / "layer.so", library);
  expectRefused(package, "layer.so has SHA-256 " + linac::sha256Hex(library) +
                             ", but integrity.files.layer.so.sha256 in "
                             "manifest.json records");
}

TEST_F(PackageIntegrity, ChangedLibraryOfAnotherInstructionSet) {
  // Every kernel file is checked at open, not only the one loaded.
  fs::path package = copy();
  if (!fs::exists(good / "layer.avx2_fma.so"))
    GTEST_SKIP() << "a package built off x86-64 has one kernel file";
  std::string library = readText(good / "layer.avx2_fma.so");
  library[library.size() / 2] ^= 0x40;
  writeText(package / "layer.avx2_fma.so", library);
  expectRefused(package, "layer.avx2_fma.so has SHA-256 " +
                             linac::sha256Hex(library) +
                             ", but integrity.files.layer.avx2_fma.so.sha256 "
                             "in manifest.json records");
}

TEST_F(PackageIntegrity, EditedManifests) {
  struct Case {
    std::string what;
    std::function<void(nlohmann::json &)> edit;
  };
  std::vector<Case> cases = {
      {"an argument removed",
       [](auto &m) { m["arguments"].erase(m["arguments"].begin() + 2); }},
      {"arguments reordered",
       [](auto &m) { std::swap(m["arguments"][0], m["arguments"][1]); }},
      {"the forward entry renamed",
       [](auto &m) { m["kernels"][0]["entry"] = "linac_cpu_decode"; }},
      {"the decode entry renamed",
       [](auto &m) { m["decode"]["entry"] = "linac_cpu_forward"; }},
      {"other dimensions", [](auto &m) { m["key_dim"] = 32; }},
      {"a normaliser", [](auto &m) { m["normal_form"]["normalizer"] = true; }},
      {"fewer decode tokens", [](auto &m) { m["decode"]["max_tokens"] = 4; }},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.what);
    fs::path package = copy();
    nlohmann::json manifest = manifestOf(package);
    c.edit(manifest);
    writeManifest(package, manifest);
    expectRefused(package, "manifest.json does not match its "
                           "integrity.contract");
    // Its hash recomputed as well: the library was built for the original.
    resealContract(package);
    expectRefused(package, "layer.so does not carry the manifest's "
                           "integrity.contract");
  }
}

TEST_F(PackageIntegrity, NumbersAreRangeChecked) {
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m["key_dim"] = 0; },
       "key_dim is 0; expected an integer from 1 to 1048576"},
      {[](auto &m) { m["value_dim"] = 1e300; }, "value_dim is 1e+300"},
      {[](auto &m) { m["decode"]["max_tokens"] = -8; },
       "decode.max_tokens is -8"},
      {[](auto &m) { m["abi_version"] = 99; },
       "kernels were built for CPU ABI version 99"},
      {[](auto &m) { m["kernels"][0]["file"] = "../layer.so"; },
       "kernels[0].file '../layer.so' is not a file of the package"},
      {[](auto &m) { m["format"] = 1; },
       "manifest format 1 is not the supported format 5"},
      {[](auto &m) { m["integrity"]["files"].erase("layer.so"); },
       "integrity.files has no entry for 'layer.so'"},
      {[](auto &m) { m["arguments"][2]["name"] = "q"; },
       "arguments[2].name 'q' appears twice"},
      {[](auto &m) {
         m["segments"] = {{"compose", m["kernels"][0]},
                          {"transition_blocks", 0}};
       },
       "segments are a GPU package's"},
      {[](auto &m) {
         m["backward_kernels"] = nlohmann::json::array({m["kernels"][0]});
       },
       "backward_kernels are a GPU package's"},
  };
  for (const Case &c : cases) {
    fs::path package = copy();
    nlohmann::json manifest = manifestOf(package);
    c.edit(manifest);
    writeManifest(package, manifest);
    // The range checks do not lean on the hash.
    resealContract(package);
    expectRefused(package, c.message);
  }
}

TEST_F(PackageIntegrity, EarlierBuildStillLoaded) {
  // dlopen gives back a library already loaded from the same path: a
  // package rebuilt in place while the old one is open must not run the old
  // code under the new manifest.
  fs::path package = copy();
  linac_package *first = nullptr;
  ASSERT_EQ(linac_package_open(package.c_str(), &first), LINAC_OK)
      << linac_last_error();
  fs::remove_all(package);
  fs::copy(compiledPath(example("retnet"), kDims, workDir()), package);
  expectRefused(package, "layer.so as loaded does not carry the manifest's "
                         "integrity.contract");
  linac_package_close(first);
  linac_package *second = nullptr;
  EXPECT_EQ(linac_package_open(package.c_str(), &second), LINAC_OK)
      << linac_last_error();
  linac_package_close(second);
}

TEST_F(PackageIntegrity, RunRefusesNpyHeadersThatLie) {
  struct Case {
    std::string shape, message;
  };
  for (const Case &c : {
           Case{"(4611686018427387904, 4, 2, 16)", "count an int64 holds"},
           Case{"(1099511627776, 1, 2, 16)", "fewer elements than its shape"},
           Case{"(1, -8, 2, 16)", "negative dimension"},
       }) {
    fs::path inputs = writeInputs("lying_npy_in");
    std::string header = "{'descr': '<f4', 'fortran_order': False, "
                         "'shape': " +
                         c.shape + ", }";
    header.append((64 - (10 + header.size() + 1) % 64) % 64, ' ');
    header += '\n';
    std::string file = std::string("\x93NUMPY\x01\x00", 8);
    file += static_cast<char>(header.size());
    file += '\0';
    writeText(inputs / "q.npy", file + header + std::string(64, '\0'));
    std::string errors;
    int status =
        runLinac("run " + good.string() + " --inputs " + inputs.string() +
                     " --outputs " + (workDir() / "out").string(),
                 errors);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1)
        << c.shape << ": " << status << " " << errors;
    EXPECT_NE(errors.find("q.npy: "), std::string::npos) << errors;
    EXPECT_NE(errors.find(c.message), std::string::npos) << errors;
  }
}

TEST_F(PackageIntegrity, ACrashReportCannotHang) {
  // A library that traps in its forward pass, sealed as if compiled so, and
  // a symbolizer that never answers: LLVM's crash report waits on it, as it
  // waits on malloc's lock after a heap corruption. The process must end.
  fs::path package = copy();
  std::string source = readText(package / "layer.cpp");
  std::string entry =
      "linac_cpu_forward(const linac_cpu_forward_args *args) {\n";
  size_t at = source.find(entry);
  ASSERT_NE(at, std::string::npos);
  source.insert(at + entry.size(), "  __builtin_trap();\n");
  writeText(package / "layer.cpp", source);
  const char *compiler = std::getenv("CXX");
  std::string command = std::string(compiler ? compiler : "c++") +
                        " -std=c++17 -O2 -fPIC -shared -pthread -I" +
                        LINAC_TEMPLATES_DIR + " " +
                        (package / "layer.cpp").string() + " " +
                        LINAC_CPU_PRODUCTS_DIR +
                        "/liblinac_cpu_products_baseline.a -o " +
                        (package / "layer.so").string();
  ASSERT_EQ(std::system(command.c_str()), 0) << command;
  resealLibrary(package);

  fs::path symbolizer = workDir() / "hanging-symbolizer";
  writeText(symbolizer, "#!/bin/sh\n"
                        "while kill -0 $PPID 2>/dev/null; do sleep 1; done\n");
  fs::permissions(symbolizer, fs::perms::owner_all);
  std::string errors;
  int status = runLinac(
      "run " + package.string() + " --inputs " +
          writeInputs("crash_in").string() + " --outputs " +
          (workDir() / "out").string(),
      // The baseline's library, the one rebuilt to trap.
      errors, "LINAC_CPU_ISA=baseline LLVM_SYMBOLIZER_PATH=" +
                  symbolizer.string() + " timeout 120");
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_NE(WEXITSTATUS(status), 124) << "the crash report hung";
  // Ended by a signal (timeout reports 128 + its number).
  EXPECT_GT(WEXITSTATUS(status), 128) << errors;
}

} // namespace
