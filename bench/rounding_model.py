#!/usr/bin/env python3
"""Where the chunkwise kernel's bf16 roundings leave an mLSTM read.

A numpy model of templates/linac/cuda/chunk.h for the mLSTM example (scalar
forget gate, exp input gate, normaliser): the same chunk of 64, the same
values rounded to bf16 where the kernel rounds them, against the exact
recurrence in fp64. It prints, for each way of rounding, the median, the
99th percentile and the worst relative error (L2, as the GPU check measures)
over fresh random draws, and how many exceed the 1e-2 tolerance.

  python3 bench/rounding_model.py --draws 200

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


def relative_error(seed, tokens, scale_in_fp32, normalizer_in_fp32):
    rng = np.random.default_rng(seed)
    q, k = bf16(rng.standard_normal((2, tokens, K)))
    v = bf16(rng.standard_normal((tokens, V)))
    write_gate = bf16(rng.standard_normal(tokens))
    forget = bf16(rng.uniform(-20, 20, tokens))  # the check's strong gates
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
        queries = q[start:end] if scale_in_fp32 else bf16(q[start:end] * scale)
        query_scale = scale if scale_in_fp32 else np.float32(1)
        keys = k[start:end]
        weights = np.exp(write_gate[start:end])
        values = np.concatenate([weights[:, None] * v[start:end], weights[:, None]], 1)
        lam = np.cumsum(np.maximum(log_gate[start:end].astype(np.float32), -60))
        lam = lam.astype(np.float32)
        delta = bf16(values)
        with np.errstate(over='ignore', invalid='ignore'):
            p = np.tril((queries @ keys.T) * np.exp(lam[:, None] - lam[None, :]))
        p = np.nan_to_num(p) * query_scale
        decay = np.exp(lam)[:, None]
        out = query_scale * (queries @ bf16(state)) * decay + bf16(p) @ delta
        if normalizer_in_fp32:
            out[:, V] = (query_scale * (queries @ state[:, V]) * decay[:, 0] +
                         p @ values[:, V])
        got[start:end] = out[:, :V] / np.maximum(np.abs(out[:, V:]), 1.0)
        decayed_keys = bf16(keys * np.exp(lam[-1] - lam)[:, None])
        state = np.exp(lam[-1]) * state + decayed_keys.T @ delta
    return np.linalg.norm(got - want) / np.linalg.norm(want)


def main():
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--draws', type=int, default=200)
    parser.add_argument('--tokens', type=int, default=300)
    parser.add_argument('--seed', type=int, default=0, help='first draw')
    args = parser.parse_args()
    for name, scale_in_fp32, normalizer_in_fp32 in [
            ('q rounded after the scale, bf16 normaliser', False, False),
            ('scale in fp32, fp32 normaliser', True, True)]:
        errors = [relative_error(args.seed + draw, args.tokens, scale_in_fp32,
                                 normalizer_in_fp32)
                  for draw in range(args.draws)]
        over = sum(error > 1e-2 for error in errors)
        print(f'{name}: median {np.median(errors):.2e}, '
              f'p99 {np.percentile(errors, 99):.2e}, worst {max(errors):.2e}, '
              f'over 1e-2 in {over} of {args.draws}')


if __name__ == '__main__':
    main()
