#!/usr/bin/env python3
"""Where the chunkwise kernel's bf16 roundings leave an mLSTM read.

A numpy model of templates/linac/cuda/chunk.h for the mLSTM example (scalar
forget gate, exp input gate, normaliser): the same chunk of 64, the same
values rounded to bf16 where the kernel rounds them, against the exact
recurrence in fp64 on the same (rounded) inputs. It prints, for each way of
rounding, the median, the 99th percentile and the worst relative error (L2
over `--pairs` sequence-head pairs, as the GPU check measures) over fresh
random draws, and how many exceed the 1e-2 tolerance.

  python3 bench/rounding_model.py --draws 200
  python3 bench/rounding_model.py --dtype float16 --gates moderate \\
      --tokens 130 --pairs 8 --draws 40      # the GPU check's fp16 case

With fp16 activations the kernel rounds q and k to bf16 once more as it
stores them for the tensor cores (bf16 inputs are already bf16, so that
rounding is exact for them); the last way of rounding keeps them at their
input precision in the query-key product P and the normaliser's read.

Needs numpy; no GPU.
"""

import argparse

import numpy as np

K = V = 128
CHUNK = 64


def bf16(x):
    """Round to nearest even bf16, kept in float32."""
    bits = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32)


def fp16(x):
    """Round to nearest fp16, kept in float32."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def pair_errors(rng, tokens, activation, gates, scale_in_fp32,
                normalizer_in_fp32, exact_query_keys):
    """Squared error and squared norm of one sequence-head pair's reads."""
    q, k = activation(rng.standard_normal((2, tokens, K)))
    v = activation(rng.standard_normal((tokens, V)))
    write_gate = activation(rng.standard_normal(tokens))
    forget = activation(rng.uniform(-20, 20, tokens) if gates == 'strong'
                        else rng.standard_normal(tokens))
    state0 = rng.standard_normal((K, V + 1)).astype(np.float32)
    scale = np.float32(K ** -0.5)
    log_gate = -np.logaddexp(0, -forget.astype(np.float64))

    state = state0.astype(np.float64)
    want = np.zeros((tokens, V))
    for t in range(tokens):
        state = np.exp(log_gate[t]) * state + np.exp(write_gate[t]) * np.outer(
            k[t], np.append(v[t], 1.0))
        read = state.T @ (q[t] * float(scale))
        want[t] = read[:V] / max(abs(read[V]), 1.0)

    state = state0.copy()
    got = np.zeros((tokens, V), np.float32)
    for start in range(0, tokens, CHUNK):
        end = min(start + CHUNK, tokens)
        # The kernel's shared copies of q and k are bf16.
        queries = bf16(q[start:end]) if scale_in_fp32 else bf16(q[start:end] * scale)
        query_scale = scale if scale_in_fp32 else np.float32(1)
        keys = bf16(k[start:end])
        pair_queries = q[start:end] if exact_query_keys else queries
        pair_keys = k[start:end] if exact_query_keys else keys
        weights = np.exp(write_gate[start:end])
        values = np.concatenate([weights[:, None] * v[start:end], weights[:, None]], 1)
        lam = np.cumsum(np.maximum(log_gate[start:end].astype(np.float32), -60))
        lam = lam.astype(np.float32)
        delta = bf16(values)
        with np.errstate(over='ignore', invalid='ignore'):
            p = np.tril((pair_queries @ pair_keys.T) *
                        np.exp(lam[:, None] - lam[None, :]))
        p = np.nan_to_num(p) * query_scale
        decay = np.exp(lam)[:, None]
        out = query_scale * (queries @ bf16(state)) * decay + bf16(p) @ delta
        if normalizer_in_fp32:
            out[:, V] = (query_scale * (pair_queries @ state[:, V]) * decay[:, 0] +
                         p @ values[:, V])
        got[start:end] = out[:, :V] / np.maximum(np.abs(out[:, V:]), 1.0)
        decayed_keys = bf16(keys * np.exp(lam[-1] - lam)[:, None])
        state = np.exp(lam[-1]) * state + decayed_keys.T @ delta
    return np.sum((got - want) ** 2), np.sum(want ** 2)


def relative_error(seed, args, *rounding):
    rng = np.random.default_rng(seed)
    activation = bf16 if args.dtype == 'bfloat16' else fp16
    squares = [pair_errors(rng, args.tokens, activation, args.gates, *rounding)
               for _ in range(args.pairs)]
    return np.sqrt(sum(e for e, _ in squares) / sum(n for _, n in squares))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--draws', type=int, default=200)
    parser.add_argument('--tokens', type=int, default=300)
    parser.add_argument('--pairs', type=int, default=1,
                        help='sequence-head pairs one error is taken over')
    parser.add_argument('--dtype', choices=['bfloat16', 'float16'],
                        default='bfloat16', help='the activations')
    parser.add_argument('--gates', choices=['strong', 'moderate'],
                        default='strong',
                        help='forget-gate inputs uniform in [-20, 20] or N(0, 1)')
    parser.add_argument('--seed', type=int, default=0, help='first draw')
    args = parser.parse_args()
    ways = [('q rounded after the scale, bf16 normaliser', False, False, False),
            ('scale in fp32, fp32 normaliser (the kernel)', True, True, False)]
    if args.dtype == 'float16':
        ways.append(('the kernel, q and k at fp16 in P and the normaliser',
                     True, True, True))
    for name, *rounding in ways:
        errors = [relative_error(args.seed + draw, args, *rounding)
                  for draw in range(args.draws)]
        over = sum(error > 1e-2 for error in errors)
        print(f'{name}: median {np.median(errors):.2e}, '
              f'p99 {np.percentile(errors, 99):.2e}, worst {max(errors):.2e}, '
              f'over 1e-2 in {over} of {args.draws}', flush=True)


if __name__ == '__main__':
    main()
