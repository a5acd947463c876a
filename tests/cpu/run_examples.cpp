//===- run_examples.cpp - the main job: every example on the CPU ----------===//
//
// Compiles each spec given on the command line for the CPU, runs it on fresh
// random data (B2 T300 H4, K = V = 128, with an initial state) and prints
// one row per spec: system, algorithm family, chunk size, the larger of the
// output's and final state's relative errors against the fp64 reference,
// and the forward pass's time. Exits non-zero if an error exceeds 1e-5.
//
//===----------------------------------------------------------------------===//

#include "harness.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <string>

namespace fs = std::filesystem;
using namespace linac::harness;

/// The system's name: the spec's first comment, up to its colon.
static std::string systemOf(const fs::path &spec) {
  std::ifstream in(spec);
  std::string line;
  std::getline(in, line);
  if (line.rfind("// ", 0) != 0)
    return spec.stem().string();
  return line.substr(3, line.find(':') - 3);
}

int main(int argc, char **argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s WORKDIR SPEC...\n", argv[0]);
    return 2;
  }
  fs::path workDir = argv[1];
  Dims dims{128, 128};
  Case c;
  c.tokens = 300;
  c.heads = 4;
  c.keyHeads = 4;
  c.initialState = true;

  std::printf("%-32s %-16s %5s %10s %10s\n", "system", "family", "chunk",
              "max error", "time ms");
  bool ok = true;
  for (int i = 2; i < argc; ++i) {
    fs::path spec = argv[i];
    try {
      auto package = compiled(spec, dims, workDir);
      nlohmann::json plan = nlohmann::json::parse(package->manifest())["plan"];
      Outcome outcome = run(*package, dims, c);
      double error = std::max(outcome.outputError, outcome.stateError);
      bool good = outcome.finite && error <= 1e-5;
      ok &= good;
      std::printf("%-32s %-16s %5s %10.2e %10.1f%s\n", systemOf(spec).c_str(),
                  plan["family"].get<std::string>().c_str(),
                  plan.contains("chunk_size")
                      ? std::to_string(plan["chunk_size"].get<int>()).c_str()
                      : "-",
                  error, outcome.milliseconds, good ? "" : "  FAILED");
    } catch (const std::exception &e) {
      ok = false;
      std::printf("%-32s FAILED: %s\n", systemOf(spec).c_str(), e.what());
    }
  }
  return ok ? 0 : 1;
}
