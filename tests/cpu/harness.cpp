//===- harness.cpp - run a CPU package beside the fp64 reference ----------===//

#include "harness.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <unistd.h>

namespace fs = std::filesystem;

namespace linac::harness {

namespace {

/// The spec text with its K x V = 128 x 128 replaced.
std::string resized(const std::string &spec, Dims dims) {
  std::string text = std::regex_replace(
      spec, std::regex("tensor<128xf32, #linac.key>"),
      "tensor<" + std::to_string(dims.k) + "xf32, #linac.key>");
  text = std::regex_replace(text, std::regex("tensor<128xf32, #linac.value>"),
                            "tensor<" + std::to_string(dims.v) +
                                "xf32, #linac.value>");
  return std::regex_replace(text, std::regex("128x128"),
                            std::to_string(dims.k) + "x" + std::to_string(dims.v));
}

std::string readFile(const fs::path &path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

/// A package's name in the caches: the spec's, its dimensions and its
/// passes.
std::string packageKey(const fs::path &spec, Dims dims, Passes passes) {
  return spec.stem().string() + "_" + std::to_string(dims.k) + "x" +
         std::to_string(dims.v) +
         (passes == Passes::ForwardOnly ? "_forward" : "");
}

} // namespace

fs::path compiledPath(const fs::path &spec, Dims dims, const fs::path &workDir,
                      Passes passes) {
  static std::map<std::string, fs::path> cache;
  std::string key = packageKey(spec, dims, passes);
  if (auto it = cache.find(key); it != cache.end())
    return it->second;
  const fs::path &dir = workDir;
  fs::create_directories(dir);
  // Test processes run side by side: each writes its own copy of the spec
  // (the package itself is installed in one rename).
  fs::path source = dir / (key + "." + std::to_string(getpid()) + ".mlir");
  std::ofstream(source) << resized(readFile(spec), dims);
  fs::path package = dir / (key + ".linac");
  std::string command =
      std::string(LINAC_TOOL) + " compile " + source.string() +
      (passes == Passes::ForwardOnly ? " --no-backward" : "") + " -o " +
      package.string() + " > /dev/null";
  if (std::system(command.c_str()) != 0)
    throw std::runtime_error("failed: " + command);
  return cache[key] = package;
}

std::shared_ptr<Package> compiled(const fs::path &spec, Dims dims,
                                  const fs::path &workDir, Passes passes) {
  static std::map<std::string, std::shared_ptr<linac::Package>> cache;
  std::string key = packageKey(spec, dims, passes);
  if (auto it = cache.find(key); it != cache.end())
    return it->second;
  return cache[key] =
             Package::open(compiledPath(spec, dims, workDir, passes).string());
}

Outcome run(const Package &package, Dims dims, const Case &c) {
  Problem problem = makeProblem(package, dims, c);
  ForwardRequest request;
  request.cuSeqlens = c.cuSeqlens;
  request.threads = c.threads;
  request.segmentTokens = c.segmentTokens;
  for (const auto &[name, argument] : problem.arguments)
    request.tensors[name] = {argument.values.data(), argument.shape};
  if (!problem.initialState.empty())
    request.initialState = problem.initialState.data();
  // Poison the outputs so that an unwritten element shows.
  std::vector<float> output(problem.outputSize, std::nanf(""));
  std::vector<float> finalState(problem.stateSize, std::nanf(""));
  request.output = output.data();
  request.finalState = finalState.data();
  auto begin = std::chrono::steady_clock::now();
  package.forward(request);
  double milliseconds = std::chrono::duration<double, std::milli>(
                            std::chrono::steady_clock::now() - begin)
                            .count();
  Outcome outcome = compare(problem, output, finalState);
  outcome.milliseconds = milliseconds;
  return outcome;
}

std::vector<fs::path> testSpecs() {
  std::vector<fs::path> all;
  for (const char *dir : {LINAC_EXAMPLES_DIR, LINAC_EXTRA_SPECS_DIR})
    for (const auto &entry : fs::directory_iterator(dir))
      if (entry.path().extension() == ".mlir")
        all.push_back(entry.path());
  std::sort(all.begin(), all.end());
  return all;
}

} // namespace linac::harness
