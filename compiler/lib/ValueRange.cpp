//===- ValueRange.cpp - the range of a step's values ----------------------===//
//
// Interval arithmetic over the extended reals. An operation whose result
// could be NaN for some operands in range (log of a negative, inf - inf)
// gets the whole line: NaN is not at most zero, so nothing is proved.
//
//===----------------------------------------------------------------------===//

#include "linac/Compiler/ValueRange.h"
#include "linac/Compiler/NormalForm.h"

#include "llvm/ADT/TypeSwitch.h"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

using namespace mlir;
using namespace linac;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

/// A range from two bounds, the whole line if either is NaN.
Range between(double lo, double hi) {
  if (std::isnan(lo) || std::isnan(hi))
    return Range::all();
  return {lo, hi};
}

/// The image of a nondecreasing function.
template <typename F> Range increasing(Range x, F f) {
  return between(f(x.lo), f(x.hi));
}

Range negate(Range x) { return {-x.hi, -x.lo}; }

Range add(Range a, Range b) { return between(a.lo + b.lo, a.hi + b.hi); }

/// Endpoint products with 0 * inf = 0: the limit of a product whose finite
/// factor is exactly 0.
double product(double a, double b) {
  return a == 0.0 || b == 0.0 ? 0.0 : a * b;
}

Range multiply(Range a, Range b) {
  double ends[] = {product(a.lo, b.lo), product(a.lo, b.hi),
                   product(a.hi, b.lo), product(a.hi, b.hi)};
  return {*std::min_element(std::begin(ends), std::end(ends)),
          *std::max_element(std::begin(ends), std::end(ends))};
}

Range divide(Range a, Range b) {
  if (b.lo <= 0.0 && b.hi >= 0.0)
    return Range::all();
  return multiply(a, {1.0 / b.hi, 1.0 / b.lo});
}

/// A function defined from `domain` on, nondecreasing there.
template <typename F> Range increasingFrom(Range x, double domain, F f) {
  return x.lo < domain ? Range::all() : increasing(x, f);
}

Range absolute(Range x) {
  if (x.lo >= 0.0)
    return x;
  if (x.hi <= 0.0)
    return negate(x);
  return {0.0, std::max(-x.lo, x.hi)};
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double softplus(double x) {
  return std::log1p(std::exp(-std::fabs(x))) + std::max(x, 0.0);
}

/// The elements of x / ||x|| keep x's sign and lie in [-1, 1].
Range unitVector(Range x) {
  return {x.lo >= 0.0 ? 0.0 : -1.0, x.hi <= 0.0 ? 0.0 : 1.0};
}

Range constantRange(arith::ConstantOp constant) {
  Attribute value = constant.getValue();
  if (auto scalar = dyn_cast<FloatAttr>(value))
    return Range::point(scalar.getValueAsDouble());
  if (auto splat = dyn_cast<SplatElementsAttr>(value))
    return Range::point(splat.getSplatValue<APFloat>().convertToDouble());
  return Range::all();
}

} // namespace

std::string Range::str() const {
  auto bound = [](double x) {
    return std::isinf(x) ? std::string(x < 0 ? "-inf" : "+inf")
                         : fmt::format("{:g}", x);
  };
  return "[" + bound(lo) + ", " + bound(hi) + "]";
}

llvm::DenseMap<Value, Range> linac::computeRanges(LayerOp layer) {
  llvm::DenseMap<Value, Range> ranges;
  for (BlockArgument arg : layer.getBody().getArguments().drop_front())
    ranges[arg] = Range::all();
  auto of = [&](Value value) { return ranges.lookup(value); };
  for (Operation &op : layer.getBody().front()) {
    if (op.getNumResults() != 1 || isa<StateType>(op.getResult(0).getType()))
      continue;
    auto operand = [&](unsigned i) { return of(op.getOperand(i)); };
    ranges[op.getResult(0)] =
        llvm::TypeSwitch<Operation *, Range>(&op)
            .Case([&](arith::ConstantOp c) { return constantRange(c); })
            .Case([&](arith::NegFOp) { return negate(operand(0)); })
            .Case([&](arith::AddFOp) { return add(operand(0), operand(1)); })
            .Case([&](arith::SubFOp) {
              return add(operand(0), negate(operand(1)));
            })
            .Case([&](arith::MulFOp) {
              return multiply(operand(0), operand(1));
            })
            .Case([&](arith::DivFOp) { return divide(operand(0), operand(1)); })
            .Case([&](arith::MaximumFOp) {
              return Range{std::max(operand(0).lo, operand(1).lo),
                           std::max(operand(0).hi, operand(1).hi)};
            })
            .Case([&](arith::MinimumFOp) {
              return Range{std::min(operand(0).lo, operand(1).lo),
                           std::min(operand(0).hi, operand(1).hi)};
            })
            .Case([&](math::ExpOp) {
              return increasing(operand(0), [](double x) { return std::exp(x); });
            })
            .Case([&](math::Exp2Op) {
              return increasing(operand(0),
                                [](double x) { return std::exp2(x); });
            })
            .Case([&](math::LogOp) {
              return increasingFrom(operand(0), 0.0,
                                    [](double x) { return std::log(x); });
            })
            .Case([&](math::Log2Op) {
              return increasingFrom(operand(0), 0.0,
                                    [](double x) { return std::log2(x); });
            })
            .Case([&](math::Log1pOp) {
              return increasingFrom(operand(0), -1.0,
                                    [](double x) { return std::log1p(x); });
            })
            .Case([&](math::SqrtOp) {
              return increasingFrom(operand(0), 0.0,
                                    [](double x) { return std::sqrt(x); });
            })
            .Case([&](math::RsqrtOp) {
              Range x = operand(0);
              return x.lo < 0.0 ? Range::all()
                                : Range{1.0 / std::sqrt(x.hi),
                                        1.0 / std::sqrt(x.lo)};
            })
            .Case([&](math::TanhOp) {
              return increasing(operand(0),
                                [](double x) { return std::tanh(x); });
            })
            .Case([&](math::AbsFOp) { return absolute(operand(0)); })
            .Case([&](SigmoidOp) { return increasing(operand(0), sigmoid); })
            .Case([&](SoftplusOp) { return increasing(operand(0), softplus); })
            .Case([&](L2NormOp) { return unitVector(operand(0)); })
            .Case([&](BroadcastOp) { return operand(0); })
            .Case([&](DotOp dot) {
              double length = elementsOf(dot.getLhs().getType());
              return multiply(multiply(operand(0), operand(1)),
                              Range::point(length));
            })
            .Case([&](HeadIndexOp) { return Range{0.0, kInf}; })
            .Default([](Operation *) { return Range::all(); });
  }
  return ranges;
}
