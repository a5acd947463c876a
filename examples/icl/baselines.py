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
    """y_hat [B] of one step with preconditioner W [d, d] and segment
    weights [K] (torch tensors), on numpy prompts."""
    X = torch.as_tensor(prompts.X, dtype=W.dtype)
    y = torch.as_tensor(prompts.y, dtype=W.dtype)
    x = torch.as_tensor(prompts.x, dtype=W.dtype)
    per_example = weights[torch.as_tensor(setting.segment_of())]
    gradient = torch.einsum('bn,bnd->bd', y * per_example, X)
    return torch.einsum('bd,de,be->b', x, W, gradient)


def risk(prompts, setting, W, weights):
    """The mean squared error of the predictor on `prompts`."""
    y = torch.as_tensor(prompts.y_query, dtype=W.dtype)
    return float(((predict(prompts, setting, W, weights) - y) ** 2).mean())


def fit(prompts, setting, weighted, steps=200):
    """(W [d, d], segment weights [K]) minimising the squared error on
    `prompts` by L-BFGS in float64; PGD's weights stay one value."""
    d, K = setting.d, setting.segments
    W = torch.eye(d, dtype=torch.float64, requires_grad=True)
    start = 1.0 / (setting.n + d + 1 + setting.sigma ** 2)
    scale = torch.full((K if weighted else 1,), start, dtype=torch.float64,
                       requires_grad=True)
    optimizer = torch.optim.LBFGS([W, scale], max_iter=steps,
                                  line_search_fn='strong_wolfe')
    y = torch.as_tensor(prompts.y_query)

    def weights():
        return scale if weighted else scale.expand(K)

    def closure():
        optimizer.zero_grad()
        loss = ((predict(prompts, setting, W, weights()) - y) ** 2).mean()
        loss.backward()
        return loss

    optimizer.step(closure)
    return W.detach(), weights().detach()
