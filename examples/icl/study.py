"""The study, in one command:

    python examples/icl/study.py [--steps 1000] [--workers N] [--device D]

trains every model (linear attention, a scalar gate, a key-vector gate;
one to three layers) on the prompts of each setting below, seeds fixed,
and measures its test risk beside the optimal PGD and WPGD predictors:

- correlation: three tasks, segment k's correlation with the query's task
  c^(2 - k) for c from 0 (only the last segment is the query's task) to 1
  (one task);
- tasks: K segments of 12 / K examples, correlations 0.5^(K - 1 - k);
- depth: one to three layers against one to three steps of PGD and WPGD;

and the weights each trained gated layer gives the segments against
WPGD's. Every model trains from `--restarts` seeds, and the one of least
risk on validation prompts (not the test prompts) is kept: from some
seeds a model never leaves the plateau of predicting nearly 0 within its
steps. It writes results.json and four PNG plots to --out and prints a
table of the risks. Training runs on `--workers` processes of one thread
each (default: every core), on CUDA when it is there.
"""

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import time
import zlib
from concurrent.futures import ProcessPoolExecutor, as_completed

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from baselines import closed_form, fit, risk  # noqa: E402
from data import Setting, sample  # noqa: E402
from model import GATES, Model  # noqa: E402
from train import evaluate, segment_weights, train  # noqa: E402

FEATURES, EXAMPLES, NOISE = 5, 12, 0.5
CORRELATIONS = (0.0, 0.25, 0.5, 0.75, 1.0)
TASK_COUNTS = (1, 2, 3, 4, 6)
DEPTHS = (1, 2, 3)
# The setting the task and depth sweeps share with the correlation sweep,
# and the one whose segment weights are plotted.
BASE_TASKS, BASE_CORRELATION, WEIGHTS_TASKS = 3, 0.5, 6
TEST_PROMPTS, FIT_PROMPTS, VALIDATION_PROMPTS = 20000, 20000, 5000
LEARNING_RATE = 1e-2


def setting_of(tasks, correlation):
    """K = `tasks` segments, the last the query's task, each earlier one
    `correlation` times less correlated with it than the next."""
    r = tuple(correlation ** (tasks - 1 - k) for k in range(tasks))
    return Setting(d=FEATURES, n=EXAMPLES, r=r, sigma=NOISE)


def held_out_prompts(tasks, correlation):
    """The same test prompts for every model and baseline of a setting."""
    rng = np.random.default_rng([tasks, round(correlation * 100)])
    return sample(setting_of(tasks, correlation), TEST_PROMPTS, rng)


def jobs():
    """(tasks, correlation, gate, depth) of every model to train."""
    configs = set()
    for gate in GATES:
        configs.update((BASE_TASKS, c, gate, 1) for c in CORRELATIONS)
        configs.update((K, BASE_CORRELATION, gate, 1) for K in TASK_COUNTS)
        configs.update((BASE_TASKS, BASE_CORRELATION, gate, L)
                       for L in DEPTHS)
    # Longest first, so that the pool ends together.
    cost = {'linear': 1, 'scalar': 1, 'vector': 1.3}
    return sorted(configs, key=lambda j: (-cost[j[2]] * j[3], j))


def train_one(job, restart, steps, device, cache):
    """Trains one model from the seed of its configuration and `restart`:
    its validation and test risks, and its segment weights at depth 1."""
    torch.set_num_threads(1)
    tasks, correlation, gate, depth = job
    setting = setting_of(tasks, correlation)
    seed = zlib.crc32(repr((job, restart)).encode())
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    start = time.perf_counter()
    model = Model(gate, setting.token_size, setting.d, depth=depth,
                  cache=cache).to(device)
    # Each layer multiplies the tokens into the next one's products: a
    # deeper stack trains at a smaller rate.
    train(model, setting, rng, steps=steps, lr=LEARNING_RATE / depth,
          device=device)
    prompts = held_out_prompts(tasks, correlation)
    result = {'tasks': tasks, 'correlation': correlation, 'gate': gate,
              'depth': depth, 'restart': restart, 'seed': seed,
              'validation': evaluate(model, setting,
                                     sample(setting, VALIDATION_PROMPTS, rng),
                                     device),
              'risk': evaluate(model, setting, prompts, device)}
    if depth == 1:
        result['weights'] = segment_weights(model, setting, prompts,
                                            device).tolist()
    result['seconds'] = time.perf_counter() - start
    return result


def best_restarts(runs):
    """Of each configuration's runs, the one of least validation risk."""
    best = {}
    for run in runs:
        key = (run['tasks'], run['correlation'], run['gate'], run['depth'])
        if key not in best or run['validation'] < best[key]['validation']:
            best[key] = run
    return sorted(best.values(), key=lambda r: (r['tasks'], r['correlation'],
                                                r['gate'], r['depth']))


def baselines():
    """The optimal one-step PGD and WPGD predictors of every setting
    (closed form): their risks on the models' test prompts, their expected
    risks and their weights; and L-step ones fitted for the depth sweep."""
    out = {}
    settings = ({(BASE_TASKS, c) for c in CORRELATIONS} |
                {(K, BASE_CORRELATION) for K in TASK_COUNTS})
    for tasks, correlation in sorted(settings):
        setting = setting_of(tasks, correlation)
        prompts = held_out_prompts(tasks, correlation)
        identity = torch.eye(setting.d, dtype=torch.float64)
        entry = {}
        for name, weighted in (('pgd', False), ('wpgd', True)):
            weights, expected = closed_form(setting, weighted)
            entry[name] = risk(prompts, setting, identity,
                               torch.as_tensor(weights))
            entry[name + '_expected'] = expected
            entry[name + '_weights'] = (weights / weights.sum()).tolist()
        out[f'{tasks},{correlation}'] = entry
    setting = setting_of(BASE_TASKS, BASE_CORRELATION)
    train_prompts = sample(setting, FIT_PROMPTS, np.random.default_rng(7))
    prompts = held_out_prompts(BASE_TASKS, BASE_CORRELATION)
    steps = {}
    for name, weighted in (('pgd', False), ('wpgd', True)):
        steps[name] = [risk(prompts, setting,
                            *fit(train_prompts, setting, weighted, steps=L))
                       for L in DEPTHS]
    out['steps'] = steps
    return out


def plot(results, base, out):
    """The four PNGs of the README."""
    import matplotlib
    matplotlib.use('Agg')
    import matplotlib.pyplot as plt

    style = {'linear': ('linear attention', 'o'),
             'scalar': ('scalar gate', 's'), 'vector': ('key-vector gate', '^')}

    def model(tasks, correlation, gate, depth=1):
        return next(r for r in results
                    if (r['tasks'], r['correlation'], r['gate'],
                        r['depth']) == (tasks, correlation, gate, depth))

    @contextlib.contextmanager
    def figure(name, xlabel, ylabel, title):
        fig, ax = plt.subplots(figsize=(5.5, 4))
        yield ax
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(os.path.join(out, name), dpi=110)
        plt.close(fig)

    def sweep(name, xs, key, xlabel, title):
        with figure(name, xlabel, 'test risk', title) as ax:
            for gate, (label, marker) in style.items():
                ax.plot(xs, [model(*key(x), gate)['risk'] for x in xs],
                        marker=marker, label=label)
            for baseline, line in (('pgd', 'k--'), ('wpgd', 'k:')):
                ax.plot(xs, [base['{},{}'.format(*key(x))][baseline]
                             for x in xs], line,
                        label=f'optimal one-step {baseline.upper()}')

    sweep('risk_vs_correlation.png', CORRELATIONS,
          lambda c: (BASE_TASKS, c), 'correlation c (r_k = c^(2 - k))',
          f'{BASE_TASKS} tasks, one layer')
    sweep('risk_vs_tasks.png', TASK_COUNTS,
          lambda K: (K, BASE_CORRELATION), 'tasks K',
          f'correlation {BASE_CORRELATION}, one layer')

    with figure('risk_vs_depth.png', 'layers L (steps of the baselines)',
                'test risk',
                f'{BASE_TASKS} tasks, correlation {BASE_CORRELATION}') as ax:
        for gate, (label, marker) in style.items():
            ax.plot(DEPTHS, [model(BASE_TASKS, BASE_CORRELATION, gate,
                                   L)['risk'] for L in DEPTHS],
                    marker=marker, label=label)
        for baseline, line in (('pgd', 'k--'), ('wpgd', 'k:')):
            ax.plot(DEPTHS, base['steps'][baseline], line,
                    label=f'best L-step {baseline.upper()}')
        ax.set_xticks(DEPTHS)

    with figure('weights.png', 'segment k (the query follows segment K)',
                'share of the weight',
                f'{WEIGHTS_TASKS} tasks, correlation {BASE_CORRELATION}') as ax:
        segments = np.arange(1, WEIGHTS_TASKS + 1)
        ax.plot(segments,
                base[f'{WEIGHTS_TASKS},{BASE_CORRELATION}']['wpgd_weights'],
                'k:', marker='x', label='optimal WPGD')
        for gate in ('scalar', 'vector'):
            label, marker = style[gate]
            ax.plot(segments,
                    model(WEIGHTS_TASKS, BASE_CORRELATION, gate)['weights'],
                    marker=marker, label=label)


def table(results, base):
    """The risks as a markdown table, a row a setting and depth."""
    rows = ['| tasks | correlation | layers | linear | scalar | vector | '
            'PGD | WPGD |', '|---|---|---|---|---|---|---|---|']
    keys = sorted({(r['tasks'], r['correlation'], r['depth'])
                   for r in results})
    for tasks, correlation, depth in keys:
        risks = {r['gate']: r['risk'] for r in results
                 if (r['tasks'], r['correlation'], r['depth']) ==
                 (tasks, correlation, depth)}
        if depth == 1:
            pgd = base[f'{tasks},{correlation}']['pgd']
            wpgd = base[f'{tasks},{correlation}']['wpgd']
        else:
            pgd = base['steps']['pgd'][depth - 1]
            wpgd = base['steps']['wpgd'][depth - 1]
        rows.append(f'| {tasks} | {correlation} | {depth} | ' +
                    ' | '.join(f'{risks[g]:.3f}' for g in GATES) +
                    f' | {pgd:.3f} | {wpgd:.3f} |')
    return '\n'.join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--steps', type=int, default=1000,
                        help='training steps of each model')
    parser.add_argument('--restarts', type=int, default=2,
                        help='seeds of each model; the study keeps the one '
                        'of least validation risk')
    parser.add_argument('--workers', type=int, default=os.cpu_count(),
                        help='training processes')
    parser.add_argument('--device', default='cuda' if torch.cuda.is_available()
                        else 'cpu')
    parser.add_argument('--out', default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), 'results'))
    parser.add_argument('--cache', default=None,
                        help='package cache (default: linac\'s)')
    args = parser.parse_args()
    from tqdm import tqdm

    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    # Compile each spec for the device once, before the workers start: a
    # layer compiles for a device at its first call there.
    for gate in GATES:
        Model(gate, 4, 0, cache=args.cache).to(args.device)(
            torch.zeros(1, 2, 4, device=args.device))
    todo = [(job, restart) for job in jobs()
            for restart in range(args.restarts)]
    runs = []
    context = multiprocessing.get_context('spawn')
    with ProcessPoolExecutor(min(args.workers, len(todo)),
                             mp_context=context) as pool:
        futures = [pool.submit(train_one, job, restart, args.steps,
                               args.device, args.cache)
                   for job, restart in todo]
        for future in tqdm(as_completed(futures), total=len(futures),
                           desc='models', unit='model'):
            runs.append(future.result())
    results = best_restarts(runs)
    base = baselines()
    seconds = time.perf_counter() - start
    with open(os.path.join(args.out, 'results.json'), 'w') as f:
        json.dump({'steps': args.steps, 'restarts': args.restarts,
                   'device': args.device, 'seconds': seconds,
                   'models': results, 'runs': runs, 'baselines': base},
                  f, indent=1)
    plot(results, base, args.out)
    print(table(results, base))
    print(f'{len(runs)} models ({len(results)} kept) in {seconds:.0f} s on '
          f'{args.device}; '
          f'results and plots in {args.out}')


if __name__ == '__main__':
    main()
