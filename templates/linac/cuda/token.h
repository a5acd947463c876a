//===- token.h - where a token's inputs live, on the GPU --------*- C++ -*-===//

#ifndef LINAC_CUDA_TOKEN_H
#define LINAC_CUDA_TOKEN_H

#include "linac/cuda/abi.h"
#include "linac/cuda/vec.h"

#include <type_traits>
#include <utility>

namespace linac::cuda {

/// One token of one head, in the arguments of a forward pass or of a
/// decode step; inputs are in the activation type T.
template <typename Layer, typename T, typename Args = linac_cuda_forward_args>
struct Token {
  const Args &args;
  int64_t token;
  int head;
  /// The first of the value columns this thread's value vectors count from:
  /// a decode item may hold a strip of the state's columns.
  int firstColumn = 0;

  /// Argument heads map onto the state's heads in contiguous groups. Most
  /// arguments have a head per state head, and are spared the division.
  LINAC_DEVICE int groupHead(int64_t heads) const {
    return heads == args.num_heads ? head
                                   : head / (int(args.num_heads) / int(heads));
  }
  LINAC_DEVICE const T *input(int i) const {
    int64_t heads = args.input_heads[i];
    return static_cast<const T *>(args.inputs[i]) +
           (token * heads + groupHead(heads)) * Layer::inputSize(i);
  }
  LINAC_DEVICE const float *param(int i) const {
    return args.params[i] + groupHead(args.param_heads[i]) * Layer::paramSize(i);
  }
};

/// The inputs of one head from token `origin` on, as a block's warps walk
/// them: each input's element of the origin and its stride in bytes from
/// token to token, taken once, so that a later token's address is one
/// wide multiply-add rather than Token's grouping of heads (which the
/// compiler keeps in a warp's loop, a branch an input). The runtime keeps a
/// token's input across heads under 2^31 bytes, and offsets from the
/// origin stay within a sequence.
template <typename Layer, typename T> struct HeadInputs {
  static constexpr int kSlots = Layer::kNumInputs > 0 ? Layer::kNumInputs : 1;
  const char *first[kSlots];
  int stride[kSlots];

  /// The inputs of the token `offset` after the origin, as Token's input(i).
  struct At {
    const HeadInputs &inputs;
    int offset;
    LINAC_DEVICE const T *input(int i) const {
      // One mad.wide: the compiler widens both factors to a 64-bit product.
      const char *p;
      asm("mad.wide.s32 %0, %1, %2, %3;"
          : "=l"(p)
          : "r"(offset), "r"(inputs.stride[i]), "l"(inputs.first[i]));
      return reinterpret_cast<const T *>(p);
    }
  };

  LINAC_DEVICE HeadInputs(const linac_cuda_forward_args &args, int64_t origin,
                          int head) {
    for (int i = 0; i < Layer::kNumInputs; ++i) {
      first[i] = reinterpret_cast<const char *>(
          Token<Layer, T>{args, origin, head}.input(i));
      stride[i] = int(args.input_heads[i] * Layer::inputSize(i) * sizeof(T));
    }
  }
  LINAC_DEVICE At at(int offset) const { return {*this, offset}; }
};

/// Calls f(std::integral_constant<int, I>) for I = 0, 1, ..., N - 1, so that
/// f's per-input sizes and offsets are constants.
template <typename F, int... I>
LINAC_DEVICE void forEachIndex(F &&f, std::integer_sequence<int, I...>) {
  (f(std::integral_constant<int, I>{}), ...);
}

/// Selects every input, for prefetchInputs.
struct EveryInput {
  LINAC_HOST_DEVICE static constexpr bool holds(int) { return true; }
};

/// Asks L2 for the inputs `Selection::holds` of tokens [first, first +
/// count) of `head`, thread `thread` of the `threads` that call it taking
/// every threads-th.
template <typename Layer, typename T, typename Selection = EveryInput,
          typename Args>
LINAC_DEVICE void prefetchInputs(const Args &args, int64_t first, int count,
                                 int head, int thread, int threads) {
  forEachIndex(
      [&](auto input) {
        constexpr int i = decltype(input)::value;
        if constexpr (!Selection::holds(i))
          return;
        constexpr int64_t bytes = Layer::inputSize(i) * int64_t(sizeof(T));
        for (int t = thread; t < count; t += threads) {
          const char *p = reinterpret_cast<const char *>(
              Token<Layer, T, Args>{args, first + t, head}.input(i));
          for (int64_t byte = 0; byte < bytes; byte += 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(p + byte));
        }
      },
      std::make_integer_sequence<int, Layer::kNumInputs>{});
}

/// The token range [begin, end) of sequence `seq`.
LINAC_DEVICE void sequenceBounds(const linac_cuda_forward_args &args,
                                 int64_t seq, int64_t &begin, int64_t &end) {
  if (args.cu_seqlens) {
    begin = args.cu_seqlens[seq];
    end = args.cu_seqlens[seq + 1];
  } else {
    begin = seq * args.tokens_per_seq;
    end = begin + args.tokens_per_seq;
  }
}

/// The sequence that holds `slot` among slots numbered a sequence after
/// another, `firstSlot(seq, begin)` its first (geometry.h's preparedSlot,
/// backwardSlot): the last whose first slot is not after it, by a binary
/// search; its token range into [begin, end).
template <typename FirstSlot>
LINAC_DEVICE int64_t sequenceOfSlot(const linac_cuda_forward_args &args,
                                    int64_t slot, FirstSlot firstSlot,
                                    int64_t &begin, int64_t &end) {
  int64_t low = 0, high = args.num_seqs - 1;
  while (low < high) {
    const int64_t mid = (low + high + 1) / 2;
    sequenceBounds(args, mid, begin, end);
    if (firstSlot(mid, begin) <= slot)
      low = mid;
    else
      high = mid - 1;
  }
  sequenceBounds(args, low, begin, end);
  return low;
}

template <typename Layer, typename Args>
LINAC_DEVICE float readScale(const Args &args) {
  return Layer::kFixedScale > 0 ? Layer::kFixedScale : args.scale;
}

/// Columns of a state in memory: the normaliser, when kept, is the last.
template <typename Layer> LINAC_HOST_DEVICE constexpr int stateColumns() {
  return Layer::V + (Layer::kNormalizer ? 1 : 0);
}

/// Offset of (sequence, head)'s state in [N, H, K, stateColumns].
template <typename Layer>
LINAC_DEVICE int64_t stateOffset(const linac_cuda_forward_args &args,
                                 int64_t seq, int head) {
  return (seq * args.num_heads + head) * int64_t(Layer::K) *
         stateColumns<Layer>();
}

} // namespace linac::cuda

#endif // LINAC_CUDA_TOKEN_H
