"""linac's CPU forward beside a naive chunked numpy forward of the same layer.

    PYTHONPATH=python LINAC_LIBRARY=build/lib/liblinac.so \
        LINAC_COMPILER=build/bin/linac python3 bench/cpu_numpy.py \
        [--shape 2,300,4 --shape 4,2048,8] [EXAMPLE...]

For every chunkable example spec (all of examples/ but full_matrix_gate,
K = V = 128, fp32) each shape times the cpu package's forward and a
chunked forward written in a few lines of numpy (a Python loop over
sequences, heads and chunks of 64, the products by numpy's BLAS, the delta
rule's solve by an explicit inverse, each example's prologue written out
over one shared `chunked`: key-side decays, fixed, scalar or vector, and
value-side ones, erases, a read before the write with RWKV-6's bonus, and
mLSTM's normaliser as the state's extra column), on the same inputs, best
of three calls each. It prints both times, their ratio and the relative
error between the two outputs, which says they compute the same layer.

The inputs are the tests' random_arguments with every parameter set to -2
(mild A_log decays). numpy's gate factors exp(lambda) and exp(-lambda) are
the naive kind that overflow fp32 once a chunk's cumulative log-gate passes
-88, so MILDER shifts an example's gate input before both linac and numpy
see it: RWKV-6's w by -2 (its log-gate -exp(w) sums to about -100 over a
chunk of standard normal w, -14 after the shift).
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


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def log_sigmoid(x):
    return -softplus(-x)


def unit(x):
    return x / np.sqrt((x * x).sum(-1, keepdims=True) + 1e-6)


def chunked(q, k, u, log_a, scale, erase=None, log_b=None, bonus=None):
    """o_t = scale S_t^T q_t with S_t = diag(e^log_a_t) S_{t-1}
    diag(e^log_b_t) (then S <- S - k (e^T S) with erase vectors e) + k u^T,
    chunk by chunk; log_a [B, T, H] (a scalar a token) or [B, T, H, K],
    log_b [B, T, H, V] or None. A bonus b [H, K] (without erase or log_b)
    reads before the token's step: o_t = scale (S_{t-1}^T q_t +
    ((q_t (.) b) . k_t) u_t)."""
    B, T, H, K = q.shape
    V = u.shape[-1]
    o = np.empty((B, T, H, V), np.float32)
    tril = np.tril(np.ones((C, C), bool))
    strict = np.tril(tril, -1)
    before = bonus is not None
    for b in range(B):
        for h in range(H):
            S = np.zeros((K, V), np.float32)
            for start in range(0, T, C):
                sl = slice(start, min(T, start + C))
                L = sl.stop - sl.start
                qc, kc, uc = q[b, sl, h], k[b, sl, h], u[b, sl, h]
                g = log_a[b, sl, h].reshape(L, -1)
                lam = np.cumsum(g, axis=0)
                gl, gk = np.exp(lam), np.exp(-lam)
                # A read before the step sees the gates up to the token before.
                gq = np.exp(lam - g) if before else gl
                P = np.where((strict if before else tril)[:L, :L],
                             (qc * gq) @ (kc * gk).T, 0.0)
                if before:
                    P[np.diag_indices(L)] = (qc * bonus[h] * kc).sum(-1)
                if log_b is not None:
                    # S = R diag(e^psi): R has no value-side decay and
                    # writes u e^-psi.
                    psi = np.cumsum(log_b[b, sl, h], axis=0)
                    uc = uc * np.exp(-psi)
                if erase is None:
                    delta = uc
                else:
                    ec = erase[b, sl, h]
                    A = np.where(strict[:L, :L], (ec * gl) @ (kc * gk).T, 0.0)
                    Tinv = np.linalg.inv(np.eye(L, dtype=np.float32) + A)
                    delta = Tinv @ (uc - (ec * gl) @ S)
                o[b, sl, h] = scale * ((qc * gq) @ S + P @ delta)
                S = (np.exp(lam[-1])[:, None] * S +
                     (kc * np.exp(lam[-1] - lam)).T @ delta)
                if log_b is not None:
                    o[b, sl, h] *= np.exp(psi)
                    S *= np.exp(psi[-1])
    return o


def no_decay(x):
    return np.zeros(x['q'].shape[:3], np.float32)


def delta_rule(x, log_a, scale, erase, write):
    """The delta rule on l2-normalised queries and keys: erase strength
    `erase` on the key, write strength `write` on the value."""
    k = unit(x['k'])
    return chunked(unit(x['q']), k, write * x['v'], log_a, scale,
                   erase=erase * k)


def linear_attention(x, scale):
    return chunked(x['q'], x['k'], x['v'], no_decay(x), scale)


def retnet(x, scale):
    heads = np.arange(x['q'].shape[2], dtype=np.float32)
    log_gamma = np.log(1 - 2.0 ** (-5 - heads))
    return chunked(x['q'], x['k'], x['v'],
                   np.broadcast_to(log_gamma, x['q'].shape[:3]), scale)


def mamba2(x, scale):
    dt = softplus(x['dt'] + x['dt_bias'])
    return chunked(x['q'], x['k'], dt[..., None] * x['v'],
                   -np.exp(x['A_log']) * dt, scale)


def mlstm(x, scale):
    # The normaliser n is the state's column V, written with u's entry 1.
    i = np.exp(x['i'])[..., None]
    o = chunked(x['q'], x['k'], np.concatenate([i * x['v'], i], -1),
                log_sigmoid(x['f']), scale)
    return o[..., :-1] / np.maximum(np.abs(o[..., -1:]), 1)


def gla(x, scale):
    return chunked(x['q'], x['k'], x['v'], log_sigmoid(x['g']) / 16, scale)


def gated_rfa(x, scale):
    log_a = log_sigmoid(x['g'])
    return chunked(x['q'], x['k'], (1 - np.exp(log_a))[..., None] * x['v'],
                   log_a, scale)


def hgrn2(x, scale):
    k = (1 - np.clip(x['lower_bound'], 0, 1)) * sigmoid(-x['g'])
    return chunked(x['q'], k, x['v'], np.log1p(-k), scale)


def gateloop(x, scale):
    return chunked(x['q'], x['k'], x['v'], log_sigmoid(x['g']), scale)


def rwkv6(x, scale):
    # The spec's read fixes its scale at 1.
    return chunked(x['r'], x['k'], x['v'], -np.exp(x['w']), 1.0,
                   bonus=x['u'])


def two_sided(x, scale):
    return chunked(x['q'], x['k'], x['v'], log_sigmoid(x['g']) / 16, scale,
                   log_b=log_sigmoid(x['h']) / 16)


def low_rank_two_sided(x, scale):
    return chunked(x['q'], x['k'], x['v'], log_sigmoid(x['a']), scale,
                   log_b=log_sigmoid(x['b']))


def deltanet(x, scale):
    beta = sigmoid(x['b'])[..., None]
    return delta_rule(x, no_decay(x), scale, beta, beta)


def gated_deltanet(x, scale):
    beta = sigmoid(x['b'])[..., None]
    log_a = -np.exp(x['A_log']) * softplus(x['g'] + x['dt_bias'])
    return delta_rule(x, log_a, scale, beta, beta)


def kda(x, scale):
    beta = sigmoid(x['b'])[..., None]
    log_a = -np.exp(x['A_log'])[:, None] * softplus(x['g'] + x['dt_bias'])
    return delta_rule(x, log_a, scale, beta, beta)


def gdn2(x, scale):
    log_a = -np.exp(x['A_log'])[:, None] * softplus(x['g'] + x['dt_bias'])
    return delta_rule(x, log_a, scale, sigmoid(x['b']), sigmoid(x['w']))


LAYERS = {f.__name__: f for f in (
    linear_attention, retnet, mamba2, mlstm, gla, gated_rfa, hgrn2, gateloop,
    rwkv6, two_sided, low_rank_two_sided, deltanet, gated_deltanet, kda,
    gdn2)}

# Shifts of gate inputs that keep a chunk's cumulative log-gate well inside
# fp32's exponent range (the module docstring says why).
MILDER = {'rwkv6': {'w': -2.0}}


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
            for param in layer.params:
                x[param] = np.full_like(x[param], -2.0)
            for arg, shift in MILDER.get(name, {}).items():
                x[arg] += shift
            ours_ms, (o, _) = best_ms(lambda: layer.forward(**x))
            numpy_ms, want = best_ms(lambda: LAYERS[name](x, scale))
            error = np.linalg.norm(o - want) / np.linalg.norm(want)
            print(f'{name} B{B} T{T} H{H}: linac {ours_ms:.1f} ms, numpy '
                  f'{numpy_ms:.1f} ms, numpy / linac {numpy_ms / ours_ms:.2f}, '
                  f'relative difference {error:.1e}', flush=True)


if __name__ == '__main__':
    main()
