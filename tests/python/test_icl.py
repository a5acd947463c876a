"""examples/icl: the prompt generator's statistics, the one-step
baselines' closed forms against Monte Carlo and against the baselines
found by optimisation, and a short training of a gated linac layer."""

import os
import sys

import numpy as np
import pytest
import torch
from torch import nn

from conftest import EXAMPLES

sys.path.insert(0, os.path.join(EXAMPLES, 'icl'))
from baselines import closed_form, fit, risk  # noqa: E402
from data import Setting, sample  # noqa: E402
from model import GATES, Model  # noqa: E402
from study import best_restarts, jobs, setting_of  # noqa: E402
from train import evaluate, segment_weights, train  # noqa: E402

MULTITASK = Setting(d=5, n=12, r=(0.2, 0.5, 0.9), sigma=0.5)


def identity(setting):
    return torch.eye(setting.d, dtype=torch.float64)


def test_tasks_correlate_as_set():
    prompts = sample(MULTITASK, 200000, np.random.default_rng())
    d, r = MULTITASK.d, np.asarray(MULTITASK.r)
    betas = prompts.segment_betas
    with_query = np.einsum('bkd,bd->k', betas, prompts.beta) / (200000 * d)
    between = np.einsum('bkd,bld->kl', betas, betas) / (200000 * d)
    assert np.abs(with_query - r).max() < 0.02
    assert np.abs(between - MULTITASK.task_correlations()).max() < 0.02
    # Each label is its segment's task on its features plus the noise.
    task = betas[:, MULTITASK.segment_of(), :]
    noise = prompts.y - np.einsum('bnd,bnd->bn', prompts.X, task)
    assert abs(noise.var() / MULTITASK.sigma ** 2 - 1) < 0.02


def test_tokens_mark_segment_starts():
    prompts = sample(MULTITASK, 3, np.random.default_rng())
    tokens = prompts.tokens(MULTITASK)
    d, n, K = MULTITASK.d, MULTITASK.n, MULTITASK.segments
    assert tokens.shape == (3, n + 1, d + 1 + K)
    np.testing.assert_allclose(tokens[:, :n, d], prompts.y, rtol=1e-6)
    np.testing.assert_allclose(tokens[:, n, :d], prompts.x, rtol=1e-6)
    marks = tokens[0, :, d + 1:]
    assert marks.sum() == K - 1
    for k in range(1, K):
        assert marks[k * MULTITASK.segment_length, k] == 1
    assert not tokens[:, n, d:].any()


def test_single_task_optimum_is_known():
    # One task: the best step is x^T X^T y / (n + d + 1 + sigma^2), with
    # risk sigma^2 + d (1 - n / (n + d + 1 + sigma^2)), and weights gain
    # nothing.
    s = Setting(d=8, n=32, r=(1.0, 1.0, 1.0, 1.0), sigma=0.5)
    denominator = s.n + s.d + 1 + s.sigma ** 2
    weights, pgd = closed_form(s, weighted=False)
    np.testing.assert_allclose(weights, 1 / denominator, rtol=1e-12)
    assert pgd == pytest.approx(s.sigma ** 2 + s.d * (1 - s.n / denominator),
                                rel=1e-12)
    weighted, wpgd = closed_form(s, weighted=True)
    np.testing.assert_allclose(weighted, weights, rtol=1e-12)
    assert wpgd == pytest.approx(pgd, rel=1e-12)


@pytest.mark.parametrize('weighted', [False, True])
def test_closed_form_risk_matches_monte_carlo(weighted):
    weights, expected = closed_form(MULTITASK, weighted)
    prompts = sample(MULTITASK, 400000, np.random.default_rng())
    got = risk(prompts, MULTITASK, identity(MULTITASK),
               torch.as_tensor(weights))
    assert got == pytest.approx(expected, rel=0.03)


def test_fitted_baselines_reach_the_closed_forms():
    rng = np.random.default_rng()
    train, test = sample(MULTITASK, 20000, rng), sample(MULTITASK, 200000, rng)
    risks = {}
    for weighted in (False, True):
        W, weights = fit(train, MULTITASK, weighted)
        risks[weighted] = risk(test, MULTITASK, W, weights)
        _, expected = closed_form(MULTITASK, weighted)
        assert risks[weighted] == pytest.approx(expected, rel=0.04)
    # Weights per segment pay here: the last segment's task is the query's
    # nearest.
    assert risks[True] < 0.93 * risks[False]


def test_more_steps_lower_the_risk():
    # A second step corrects the first's residuals: L-step WPGD beats
    # one step.
    rng = np.random.default_rng()
    train, test = sample(MULTITASK, 20000, rng), sample(MULTITASK, 100000, rng)
    one = risk(test, MULTITASK, *fit(train, MULTITASK, True, steps=1))
    W, weights = fit(train, MULTITASK, True, steps=2)
    assert W.shape == (2, MULTITASK.d, MULTITASK.d)
    assert weights.shape == (2, MULTITASK.segments)
    two = risk(test, MULTITASK, W, weights)
    assert two < 0.97 * one


class OneStep(nn.Module):
    """x^T c sum_i w_k(i) y_i x_i read off the tokens: one WPGD step."""

    def __init__(self, setting, weights, c):
        super().__init__()
        self.setting, self.c = setting, c
        self.per_example = torch.as_tensor(
            weights, dtype=torch.float32)[setting.segment_of()]

    def forward(self, tokens):
        n, d = self.setting.n, self.setting.d
        X, y, x = tokens[:, :n, :d], tokens[:, :n, d], tokens[:, n, :d]
        return self.c * torch.einsum('bd,bnd,bn->b', x, X,
                                     y * self.per_example)


def test_segment_weights_recover_a_step():
    weights = np.random.default_rng().uniform(0.1, 1.0, MULTITASK.segments)
    model = OneStep(MULTITASK, weights, c=0.3)
    prompts = sample(MULTITASK, 500, np.random.default_rng())
    np.testing.assert_allclose(segment_weights(model, MULTITASK, prompts),
                               weights / weights.sum(), rtol=1e-4)


def test_settings_are_checked():
    with pytest.raises(ValueError, match='multiple'):
        Setting(d=4, n=10, r=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match='outside'):
        Setting(d=4, n=12, r=(0.5, 1.5, 0.5))


@pytest.mark.parametrize('gate', ['scalar', 'vector'])
def test_a_gated_layer_learns_what_linear_attention_cannot(gate, cache):
    # A gate reading the segment boundaries weights the segments, so a
    # short training (seeds fixed) takes it below the best risk of any
    # linear attention layer, one-step PGD's, and its weights rise towards
    # the query's segment as WPGD's do.
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = Model(gate, MULTITASK.token_size, MULTITASK.d, cache=cache)
    train(model, MULTITASK, rng, steps=400)
    prompts = sample(MULTITASK, 20000, rng)
    got = evaluate(model, MULTITASK, prompts)
    _, linear_best = closed_form(MULTITASK, weighted=False)
    assert got < 0.97 * linear_best
    weights = segment_weights(model, MULTITASK, prompts)
    assert weights[0] < weights[1] < weights[2]


@pytest.mark.parametrize('gate', sorted(GATES))
def test_every_model_starts_with_open_gates(gate, cache):
    # Every gate starts at sigmoid(4) on every token whatever it reads, and
    # the gradients of a stack reach every projection.
    model = Model(gate, MULTITASK.token_size, MULTITASK.d, depth=2,
                  cache=cache)
    prompts = sample(MULTITASK, 8, np.random.default_rng())
    tokens = torch.from_numpy(prompts.tokens(MULTITASK))
    for layer in model.layers:
        assert ('g' in layer.projections) == (GATES[gate] is not None)
        if 'g' in layer.projections:
            gates = torch.sigmoid(layer.projections['g'](tokens))
            assert torch.allclose(gates, torch.sigmoid(torch.tensor(4.0)))
    prediction = model(tokens)
    assert prediction.shape == (8,) and prediction.any()
    prediction.square().sum().backward()
    assert all(p.grad is not None and p.grad.any()
               for p in model.parameters())


def test_layers_after_the_first_read_normalised_tokens(cache):
    # The second layer's input has an RMS of 1 on every token, however
    # large the prompt and the first layer's output.
    model = Model('scalar', MULTITASK.token_size, MULTITASK.d, depth=2,
                  cache=cache)
    seen = []
    model.layers[1].register_forward_pre_hook(
        lambda module, args: seen.append(args[0].detach()))
    prompts = sample(MULTITASK, 4, np.random.default_rng())
    model(100 * torch.from_numpy(prompts.tokens(MULTITASK)))
    rms = seen[0].square().mean(-1).sqrt()
    assert torch.allclose(rms, torch.ones_like(rms), rtol=1e-3)


def test_study_settings_and_restarts():
    # The last segment is the query's task, each earlier one c times less
    # correlated; every configuration trains once; of its restarts the
    # least validation risk is kept, whatever its test risk.
    assert setting_of(4, 0.5).r == (0.125, 0.25, 0.5, 1.0)
    assert setting_of(3, 0.0).r == (0.0, 0.0, 1.0)
    configs = jobs()
    assert len(configs) == len(set(configs))
    assert {gate for _, _, gate, _ in configs} == set(GATES)

    def run(restart, validation, test):
        return {'tasks': 3, 'correlation': 0.5, 'gate': 'scalar', 'depth': 1,
                'restart': restart, 'validation': validation, 'risk': test}

    kept = best_restarts([run(0, 3.2, 3.0), run(1, 3.1, 3.3),
                          dict(run(0, 9.0, 9.0), gate='vector')])
    assert [(r['gate'], r['restart']) for r in kept] == [('scalar', 1),
                                                         ('vector', 0)]
