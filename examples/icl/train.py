"""Training and evaluation of a model (model.py) on fresh prompts."""

import numpy as np
import torch
from torch import nn

from data import sample


def batch_of(prompts, setting, device='cpu'):
    """(tokens, labels) of numpy prompts as float32 tensors on `device`."""
    return (torch.from_numpy(prompts.tokens(setting)).to(device),
            torch.from_numpy(prompts.y_query.astype(np.float32)).to(device))


def train(model, setting, rng, steps=1000, batch=256, lr=1e-2, clip=1.0,
          device='cpu', progress=None):
    """Adam on the squared error, each step on `batch` fresh prompts drawn
    from `rng`, the learning rate falling from `lr` to 0 on a cosine and
    the gradient's norm clipped to `clip` (a deeper stack's products of
    layers otherwise blow up now and then); `progress(step, loss)` after
    each step when given."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    schedule = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    for step in range(steps):
        tokens, labels = batch_of(sample(setting, batch, rng), setting, device)
        loss = ((model(tokens) - labels) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        schedule.step()
        if progress:
            progress(step, loss.item())
    return model


def evaluate(model, setting, prompts, device='cpu'):
    """The model's mean squared error on `prompts`."""
    tokens, labels = batch_of(prompts, setting, device)
    with torch.no_grad():
        return float(((model(tokens) - labels) ** 2).mean())


def segment_weights(model, setting, prompts, device='cpu'):
    """The weight [K] the model gives each segment, summing to 1: the slope
    of d y_hat / d y_i against x^T x_i over the segment's examples, which
    is c w_k for a one-step WPGD predictor with W = c I, whatever else the
    model does."""
    tokens, _ = batch_of(prompts, setting, device)
    tokens.requires_grad_(True)
    prediction = model(tokens)
    (grads,) = torch.autograd.grad(prediction.sum(), tokens)
    n, d = setting.n, setting.d
    through_label = grads[:, :n, d].double().cpu().numpy()
    alignment = np.einsum('bd,bnd->bn', prompts.x, prompts.X)
    segment = setting.segment_of()
    slopes = np.array([
        (through_label[:, segment == k] * alignment[:, segment == k]).sum() /
        (alignment[:, segment == k] ** 2).sum()
        for k in range(setting.segments)])
    return slopes / slopes.sum()
