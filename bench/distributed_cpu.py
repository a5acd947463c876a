"""linac.distributed on the host: one sequence's forward split over gloo
processes, each pinned to a core of its own, against one process on one
core and on as many cores as there are ranks.

    python bench/distributed_cpu.py --spec examples/gated_deltanet.mlir \\
        --tokens 16384 --heads 4 --world 2

Prints one JSON line per case: the median of --runs calls in ms (the
slowest rank's, after a barrier) and its ratio to one process on one core.
"""

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import linac
import linac.distributed
import linac.torch


def arguments(layer, tokens, heads):
    """Random inputs, with each decay's gate input shifted towards weak
    decay as trained layers have them (the times do not depend on it)."""
    generator = torch.Generator().manual_seed(0)
    sizes = {'key': (layer.key_dim,), 'value': (layer.value_dim,),
             'scalar': (), 'matrix': (layer.key_dim, layer.value_dim)}
    tensors = {}
    for arg in layer.arguments:
        if arg.role == 'input':
            shape = (1, tokens, heads) + sizes[arg.kind]
            tensors[arg.name] = torch.randn(shape, generator=generator)
        elif arg.role == 'param':
            tensors[arg.name] = 0.5 * torch.ones((heads,) + sizes[arg.kind])
    return tensors


def time_calls(call, runs, barrier=lambda: None):
    times = []
    for _ in range(runs + 1):
        barrier()
        start = time.perf_counter()
        call()
        barrier()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[1:])


def single(path, tokens, heads, cores, runs):
    os.sched_setaffinity(0, set(range(cores)))
    layer = linac.load(path)
    tensors = arguments(layer, tokens, heads)
    return time_calls(lambda: linac.torch.forward(layer, **tensors), runs)


def rank_main(rank, world, store, path, tokens, heads, runs, queue):
    os.sched_setaffinity(0, {rank % os.cpu_count()})
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'file://{store}', rank=rank,
                            world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    layer = linac.load(path)
    context = linac.distributed.context([0, tokens])
    mine = {n: t[:, context.begin:context.end] if n in layer.inputs else t
            for n, t in arguments(layer, tokens, heads).items()}
    ms = time_calls(lambda: linac.distributed.forward(layer, context, **mine),
                    runs, dist.barrier)
    if rank == 0:
        queue.put(ms)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--spec', required=True)
    parser.add_argument('--tokens', type=int, default=16384)
    parser.add_argument('--heads', type=int, default=4)
    parser.add_argument('--world', type=int, default=2)
    parser.add_argument('--runs', type=int, default=3)
    options = parser.parse_args()
    path = linac.compile(options.spec).path
    shape = dict(spec=os.path.basename(options.spec), tokens=options.tokens,
                 heads=options.heads)
    one = single(path, options.tokens, options.heads, 1, options.runs)
    rows = [('one process, 1 core', one),
            (f'one process, {options.world} cores',
             single(path, options.tokens, options.heads, options.world,
                    options.runs))]
    context = mp.get_context('spawn')
    queue = context.SimpleQueue()
    with tempfile.TemporaryDirectory() as directory:
        mp.start_processes(
            rank_main, nprocs=options.world, start_method='spawn',
            args=(options.world, os.path.join(directory, 'store'), path,
                  options.tokens, options.heads, options.runs, queue))
    rows.append((f'{options.world} ranks, 1 core each', queue.get()))
    for case, ms in rows:
        print(json.dumps(dict(shape, case=case, ms=round(ms, 1),
                              speedup=round(one / ms, 2))))


if __name__ == '__main__':
    main()
