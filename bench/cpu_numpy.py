"""linac's CPU forward beside a naive chunked numpy forward of the same layer.

    PYTHONPATH=python LINAC_LIBRARY=build/lib/liblinac.so \
        LINAC_COMPILER=build/bin/linac python3 bench/cpu_numpy.py \
        [--shape 2,300,4 --shape 4,2048,8] [EXAMPLE...]

For linear_attention, gla and gated_deltanet (the examples' specs, K = V =
128, fp32) each shape times the cpu package's forward and a chunked
forward written in a few lines of numpy (a Python loop over sequences,
heads and chunks of 64, the products by numpy's BLAS, the delta rule's
solve by an explicit inverse, each example's prologue written out), on the
same inputs, best of three calls each. It prints both times, their ratio
and the relative error between the two outputs, which says they compute
the same layer. numpy's gate factors exp(lambda) and exp(-lambda) are the
naive kind that overflow under strong gates; the inputs keep them mild.
"""

import argparse
import os
import sys
import time

import numpy as np

import linac

sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..', 'tests',
                                'python'))
from test_layer import random_arguments  # noqa: E402

C = 64


def softplus(x):
    return np.logaddexp(0.0, x)


def chunked(q, k, v, log_a, scale, erase=None):
    """o_t = scale S_t^T q_t with S_t = diag(e^log_a_t) S_{t-1} (then
    S <- S - k (e^T S) with erase vectors e) + k v^T, chunk by chunk;
    log_a [B, T, H] (a scalar a token) or [B, T, H, K]."""
    B, T, H, K = q.shape
    V = v.shape[-1]
    o = np.empty((B, T, H, V), np.float32)
    tril = np.tril(np.ones((C, C), bool))
    for b in range(B):
        for h in range(H):
            S = np.zeros((K, V), np.float32)
            for start in range(0, T, C):
                sl = slice(start, min(T, start + C))
                L = sl.stop - sl.start
                qc, kc, vc = q[b, sl, h], k[b, sl, h], v[b, sl, h]
                lam = np.cumsum(log_a[b, sl, h], axis=0)
                if lam.ndim == 1:
                    lam = lam[:, None]
                gq, gk = np.exp(lam), np.exp(-lam)
                P = np.where(tril[:L, :L], (qc * gq) @ (kc * gk).T, 0.0)
                last = np.exp(lam[-1] - lam)
                if erase is None:
                    delta = vc
                else:
                    ec = erase[b, sl, h]
                    A = np.where(np.tril(tril[:L, :L], -1),
                                 (ec * gq) @ (kc * gk).T, 0.0)
                    Tinv = np.linalg.inv(np.eye(L, dtype=np.float32) + A)
                    delta = Tinv @ (vc - (ec * gq) @ S)
                o[b, sl, h] = scale * ((qc * gq) @ S + P @ delta)
                S = np.exp(lam[-1])[:, None] * S + (kc * last).T @ delta
    return o


def unit(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def linear_attention(x, scale):
    return chunked(x['q'], x['k'], x['v'],
                   np.zeros(x['q'].shape[:3], np.float32), scale)


def gla(x, scale):
    return chunked(x['q'], x['k'], x['v'], -softplus(-x['g']) / 16, scale)


def gated_deltanet(x, scale):
    q, k = unit(x['q']), unit(x['k'])
    beta = 1 / (1 + np.exp(-x['b']))
    log_a = -np.exp(x['A_log']) * softplus(x['g'] + x['dt_bias'])
    return chunked(q, k, beta[..., None] * x['v'], log_a, scale,
                   erase=beta[..., None] * k)


LAYERS = {'linear_attention': linear_attention, 'gla': gla,
          'gated_deltanet': gated_deltanet}


def best_ms(call):
    best = float('inf')
    for _ in range(3):
        start = time.perf_counter()
        result = call()
        best = min(best, time.perf_counter() - start)
    return best * 1e3, result


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('examples', nargs='*', default=list(LAYERS))
    parser.add_argument('--shape', action='append', default=[],
                        help='B,T,H (repeatable; default 2,300,4)')
    args = parser.parse_args()
    shapes = [tuple(map(int, s.split(','))) for s in args.shape] or [(2, 300, 4)]
    for name in args.examples:
        layer = linac.compile(f'examples/{name}.mlir')
        scale = layer.key_dim ** -0.5
        for B, T, H in shapes:
            x = random_arguments(layer, B, T, H, np.random.default_rng(0))
            # Parameters of -2 keep Gated DeltaNet's decays mild.
            for param in layer.params:
                x[param] = np.full_like(x[param], -2.0)
            ours_ms, (o, _) = best_ms(lambda: layer.forward(**x))
            numpy_ms, want = best_ms(lambda: LAYERS[name](x, scale))
            error = np.linalg.norm(o - want) / np.linalg.norm(want)
            print(f'{name} B{B} T{T} H{H}: linac {ours_ms:.1f} ms, numpy '
                  f'{numpy_ms:.1f} ms, numpy / linac {numpy_ms / ours_ms:.2f}, '
                  f'relative difference {error:.1e}', flush=True)


if __name__ == '__main__':
    main()
