//===- package.h - the linac runtime's C++ API ------------------*- C++ -*-===//

#ifndef LINAC_PACKAGE_H
#define LINAC_PACKAGE_H

#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace linac {

/// A bad argument or package; the message says which and why.
struct Error : std::runtime_error {
  enum class Kind { InvalidArgument, Package, Kernel };
  Error(Kind kind, const std::string &message)
      : std::runtime_error(message), kind(kind) {}
  Kind kind;
};

struct ArgumentInfo {
  std::string name;
  std::string role;  ///< input, param or runtime
  std::string kind;  ///< key, value, scalar, matrix, state, index
  std::string shape; ///< e.g. "[B, T, H, K]"
};

struct HostTensor {
  const float *data = nullptr;
  std::vector<int64_t> shape;
};

struct ForwardRequest {
  std::map<std::string, HostTensor> tensors; ///< inputs and parameters
  std::vector<int64_t> cuSeqlens;            ///< empty: B sequences of T
  const float *initialState = nullptr;
  float *finalState = nullptr;
  float *output = nullptr;
  float scale = 0.0f;
};

/// Shapes a validated request implies.
struct ForwardShape {
  int64_t batch = 0, tokens = 0, heads = 0, sequences = 0;
};

class Package {
public:
  /// Loads NAME.linac/: checks the manifest and loads the kernel.
  static std::unique_ptr<Package> open(const std::string &path);
  ~Package();

  const std::string &layer() const { return layer_; }
  const std::string &target() const { return target_; }
  int64_t keyDim() const { return keyDim_; }
  int64_t valueDim() const { return valueDim_; }
  const std::vector<ArgumentInfo> &arguments() const { return arguments_; }
  /// The manifest's text, for tools that show or test it.
  const std::string &manifest() const { return manifest_; }

  /// Validates `request`'s tensors and returns the shapes they imply.
  ForwardShape check(const ForwardRequest &request) const;
  /// Runs the forward pass on host buffers.
  void forward(const ForwardRequest &request) const;

private:
  Package() = default;
  std::string layer_, target_, manifest_;
  int64_t keyDim_ = 0, valueDim_ = 0;
  std::vector<ArgumentInfo> arguments_;
  std::vector<ArgumentInfo> inputs_, params_;
  void *library_ = nullptr;
  void *forward_ = nullptr;
};

} // namespace linac

#endif // LINAC_PACKAGE_H
