"""The one-step predictors a layer is measured against, found without
linac: preconditioned gradient descent (PGD) and weighted preconditioned
gradient descent (WPGD) from beta_0 = 0,

    y_hat = x^T W sum_i w_k(i) y_i x_i,

PGD with one weight for every example, WPGD with one weight a segment
(the prompt's examples are exchangeable within a segment, so the best
weights are too). `fit` finds W and the weights by minimising the squared
error over sampled prompts (torch, L-BFGS); `closed_form` gives the
optimum and its risk for the isotropic prompts of data.py, where W is a
multiple of I:

    risk(w) = sigma^2 + d [1 - 2 w~^T r~ + (d + 1 + sigma^2) |w~|^2
                           + w~^T R~ w~],

with w~, r~ and R~ the weights and correlations spread over the examples,
so w* = ((d + 1 + sigma^2) I_K + R N)^-1 r (N = n / K) and risk(w*) =
sigma^2 + d (1 - N r^T w*).

L steps, the yardstick of L layers, start each from the last's estimate:

    beta_(l+1) = beta_l + W_l sum_i w_(l, k(i)) (y_i - x_i^T beta_l) x_i,

and y_hat = x^T beta_L; `fit` finds every step's W_l and weights.
"""

import numpy as np
import torch


def closed_form(setting, weighted):
    """(segment weights [K], risk) of the best one-step WPGD (`weighted`)
    or PGD predictor with W = I."""
    d, K, N = setting.d, setting.segments, setting.segment_length
    s2 = setting.sigma ** 2
    r = np.asarray(setting.r, np.float64)
    R = setting.task_correlations()
    if weighted:
        w = np.linalg.solve((d + 1 + s2) * np.eye(K) + R * N, r)
    else:
        ones = np.ones(K)
        c = N * r.sum() / ((d + 1 + s2) * setting.n +
                           N * N * ones @ R @ ones)
        w = np.full(K, c)
    return w, s2 + d * (1.0 - N * r @ w)


def predict(prompts, setting, W, weights):
    """y_hat [B] of L steps with preconditioners W [L, d, d] and segment
    weights [L, K] (torch tensors; [d, d] and [K] for one step), on numpy
    prompts."""
    X = torch.as_tensor(prompts.X, dtype=W.dtype)
    y = torch.as_tensor(prompts.y, dtype=W.dtype)
    x = torch.as_tensor(prompts.x, dtype=W.dtype)
    segment = torch.as_tensor(setting.segment_of())
    beta = torch.zeros_like(x)
    for W_l, weights_l in zip(W.reshape(-1, *W.shape[-2:]),
                              weights.reshape(-1, weights.shape[-1])):
        residuals = y - torch.einsum('bnd,bd->bn', X, beta)
        gradient = torch.einsum('bn,bnd->bd', residuals * weights_l[segment],
                                X)
        beta = beta + gradient @ W_l.T
    return torch.einsum('bd,bd->b', x, beta)


def risk(prompts, setting, W, weights):
    """The mean squared error of the predictor on `prompts`."""
    y = torch.as_tensor(prompts.y_query, dtype=W.dtype)
    return float(((predict(prompts, setting, W, weights) - y) ** 2).mean())


def fit(prompts, setting, weighted, steps=1, iterations=200):
    """(W [d, d], segment weights [K]) minimising the squared error on
    `prompts` by L-BFGS in float64, or with `steps` > 1 (W [steps, d, d],
    weights [steps, K]); PGD's weights stay one value a step."""
    d, K = setting.d, setting.segments
    W = torch.eye(d, dtype=torch.float64).repeat(steps, 1, 1)
    W.requires_grad_(True)
    start = 1.0 / (setting.n + d + 1 + setting.sigma ** 2)
    scale = torch.full((steps, K if weighted else 1), start,
                       dtype=torch.float64, requires_grad=True)
    optimizer = torch.optim.LBFGS([W, scale], max_iter=iterations,
                                  line_search_fn='strong_wolfe')
    y = torch.as_tensor(prompts.y_query)

    def weights():
        return scale if weighted else scale.expand(steps, K)

    def closure():
        optimizer.zero_grad()
        loss = ((predict(prompts, setting, W, weights()) - y) ** 2).mean()
        loss.backward()
        return loss

    optimizer.step(closure)
    if steps == 1:
        return W.detach()[0], weights().detach()[0]
    return W.detach(), weights().detach()
