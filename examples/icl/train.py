"""Training and evaluation of a model (model.py) on fresh prompts."""

import numpy as np
import torch


def batch_of(prompts, setting):
    """(tokens, labels) of numpy prompts as float32 tensors."""
    return (torch.from_numpy(prompts.tokens(setting)),
            torch.from_numpy(prompts.y_query.astype(np.float32)))


def train(model, setting, rng, steps=400, batch=256, lr=3e-3, progress=None):
    """Adam on the squared error, each step on `batch` fresh prompts drawn
    from `rng`; `progress(step, loss)` after each step when given."""
    from data import sample
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    for step in range(steps):
        tokens, labels = batch_of(sample(setting, batch, rng), setting)
        loss = ((model(tokens) - labels) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if progress:
            progress(step, float(loss))
    return model


def evaluate(model, setting, prompts):
    """The model's mean squared error on `prompts`."""
    tokens, labels = batch_of(prompts, setting)
    with torch.no_grad():
        return float(((model(tokens) - labels) ** 2).mean())
