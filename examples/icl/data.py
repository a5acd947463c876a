"""Multitask in-context regression prompts.

A prompt holds n examples (x_i, y_i) in K segments of n / K examples each,
then a query x whose label y is to be predicted. Every segment has a task
vector of its own, correlated with the query's task to its own degree:

    beta   ~ N(0, I_d)                                  the query's task
    beta_k = r_k beta + sqrt(1 - r_k^2) xi_k,  xi_k ~ N(0, I_d)
    x_i    ~ N(0, I_d),  y_i = beta_k(i)^T x_i + sigma eps_i
    x      ~ N(0, I_d),  y   = beta^T x + sigma eps

so E[beta_k beta^T] = r_k I and E[beta_k beta_l^T] = R_kl I with
R = r r^T + diag(1 - r^2). All r_k = 1 is the single-task regime.

A token is [x_i, y_i, f_i]: f_i in R^K marks the first example of segment
k (k > 1) with the unit vector e_k and is zero elsewhere, so that a gate
that reads it can decay once at each boundary, by an amount of the
boundary's own; the query token is [x, 0, 0].
"""

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Setting:
    """A prompt distribution: d features, n examples in len(r) segments,
    each segment's correlation r_k with the query's task, noise sigma."""
    d: int
    n: int
    r: tuple
    sigma: float = 0.5

    def __post_init__(self):
        if self.n % len(self.r):
            raise ValueError(f'n = {self.n} is not a multiple of the '
                             f'{len(self.r)} segments')
        if any(not -1.0 <= c <= 1.0 for c in self.r):
            raise ValueError(f'correlations {self.r} outside [-1, 1]')

    @property
    def segments(self):
        return len(self.r)

    @property
    def segment_length(self):
        return self.n // self.segments

    @property
    def token_size(self):
        return self.d + 1 + self.segments

    def segment_of(self):
        """Each example's segment, [n]."""
        return np.repeat(np.arange(self.segments), self.segment_length)

    def task_correlations(self):
        """R, [K, K]: E[beta_k beta_l^T] = R_kl I."""
        r = np.asarray(self.r, np.float64)
        return np.outer(r, r) + np.diag(1.0 - r * r)


@dataclass
class Prompts:
    """A batch of B prompts: examples X [B, n, d] and y [B, n], queries
    x [B, d] and their labels y_query [B], task vectors (for tests)."""
    X: np.ndarray
    y: np.ndarray
    x: np.ndarray
    y_query: np.ndarray
    beta: np.ndarray
    segment_betas: np.ndarray

    def tokens(self, setting):
        """[B, n + 1, d + 1 + K] float32: the examples' tokens, then the
        query's."""
        B, n, d = self.X.shape
        K = setting.segments
        out = np.zeros((B, n + 1, d + 1 + K), np.float32)
        out[:, :n, :d] = self.X
        out[:, :n, d] = self.y
        out[:, n, :d] = self.x
        starts = np.arange(1, K) * setting.segment_length
        out[:, starts, d + 1 + np.arange(1, K)] = 1.0
        return out


def sample(setting, batch, rng):
    """`batch` prompts of `setting`, drawn from `rng` (numpy Generator)."""
    d, n, K = setting.d, setting.n, setting.segments
    r = np.asarray(setting.r, np.float64)[None, :, None]
    beta = rng.standard_normal((batch, d))
    xi = rng.standard_normal((batch, K, d))
    segment_betas = r * beta[:, None, :] + np.sqrt(1.0 - r * r) * xi
    X = rng.standard_normal((batch, n, d))
    per_example = segment_betas[:, setting.segment_of(), :]
    y = np.einsum('bnd,bnd->bn', X, per_example)
    y += setting.sigma * rng.standard_normal((batch, n))
    x = rng.standard_normal((batch, d))
    y_query = np.einsum('bd,bd->b', x, beta)
    y_query += setting.sigma * rng.standard_normal(batch)
    return Prompts(X, y, x, y_query, beta, segment_betas)
