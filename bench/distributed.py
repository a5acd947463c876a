"""linac.distributed's forward of one long sequence split over ranks, and
FLA's context-parallel op beside it, timed in the same processes.

    python bench/distributed.py --package gated_deltanet.linac \\
        --tokens 262144 --heads 16 --world 1,2,4,8 --device cuda \\
        --fla gated_delta_rule

On the CPU each rank is a gloo process pinned to a core of its own
(--spec compiles a cpu package here); on CUDA one NCCL rank a GPU, the
package compiled elsewhere (--package). For every world size it prints a
JSON line per implementation: the median over --runs of the slowest rank's
time (a barrier before and after each call) and, when --world has 1, the
scaling efficiency: the one-rank time over world x this time. FLA's op (chunk_gated_delta_rule
or chunk_kda, with its cp_context) runs on inputs of the same shapes.
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


def linac_arguments(layer, tokens, heads, device, dtype):
    """Random inputs in `dtype` and parameters in float32, keys scaled by
    K^-1/2; gate inputs standard normal (the times do not depend on them)."""
    generator = torch.Generator().manual_seed(0)
    sizes = {'key': (layer.key_dim,), 'value': (layer.value_dim,),
             'scalar': (), 'matrix': (layer.key_dim, layer.value_dim)}
    tensors = {}
    for arg in layer.arguments:
        if arg.role == 'input':
            shape = (1, tokens, heads) + sizes[arg.kind]
            tensors[arg.name] = torch.randn(shape, generator=generator).to(
                device, dtype)
        elif arg.role == 'param':
            tensors[arg.name] = torch.full((heads,) + sizes[arg.kind], 0.5,
                                           device=device)
    return tensors


def fla_call(name, context, tokens, heads, dim, device, dtype):
    """FLA's context-parallel op on random inputs of this rank's shape."""
    import torch.nn.functional as F
    from fla.ops.cp import build_cp_context
    cp = build_cp_context(torch.tensor(context.cu_seqlens, device=device),
                          group=context.group)

    def draw(*shape):
        return torch.randn(*shape, device=device, dtype=dtype)
    q, k, v = (draw(1, tokens, heads, dim) for _ in range(3))
    beta = torch.rand(1, tokens, heads, device=device, dtype=dtype)
    if name == 'gated_delta_rule':
        from fla.ops.gated_delta_rule import chunk_gated_delta_rule as op
        g = F.logsigmoid(draw(1, tokens, heads).float())
    else:
        from fla.ops.kda import chunk_kda as op
        g = F.logsigmoid(draw(1, tokens, heads, dim).float())
    return lambda: op(q, k, v, g, beta, cp_context=cp,
                      use_qk_l2norm_in_kernel=True)


def time_calls(call, runs, synchronize):
    times = []
    for _ in range(runs + 1):
        synchronize()
        dist.barrier()
        start = time.perf_counter()
        call()
        synchronize()
        dist.barrier()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times[1:])


def rank_main(rank, world, store, options, queue):
    if options.device == 'cuda':
        device = f'cuda:{rank}'
        torch.cuda.set_device(device)
        backend, dtype = 'nccl', getattr(torch, options.dtype)
        synchronize = torch.cuda.synchronize
    else:
        os.sched_setaffinity(0, {rank % os.cpu_count()})
        torch.set_num_threads(1)
        device, backend, dtype = 'cpu', 'gloo', torch.float32
        synchronize = lambda: None  # noqa: E731
    dist.init_process_group(backend, init_method=f'file://{store}',
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    layer = linac.load(options.package)
    context = linac.distributed.context([0, options.tokens])
    whole = linac_arguments(layer, options.tokens, options.heads, device,
                            dtype)
    mine = {n: t[:, context.begin:context.end] if n in layer.inputs else t
            for n, t in whole.items()}
    del whole
    with torch.no_grad():
        times = {'linac': time_calls(
            lambda: linac.distributed.forward(layer, context, **mine),
            options.runs, synchronize)}
        if options.fla:
            times['fla'] = time_calls(
                fla_call(options.fla, context, context.tokens, options.heads,
                         layer.key_dim, device, dtype),
                options.runs, synchronize)
    if rank == 0:
        queue.put(times)
    dist.destroy_process_group()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--package', help='a compiled package')
    parser.add_argument('--spec', help='a spec to compile for the cpu')
    parser.add_argument('--device', choices=['cpu', 'cuda'], default='cpu')
    parser.add_argument('--dtype', default='bfloat16',
                        help='the inputs\' dtype on CUDA')
    parser.add_argument('--tokens', type=int, default=16384)
    parser.add_argument('--heads', type=int, default=4)
    parser.add_argument('--world', default='1,2',
                        help='world sizes, comma-separated')
    parser.add_argument('--runs', type=int, default=3)
    parser.add_argument('--fla', choices=['gated_delta_rule', 'kda'],
                        help="FLA's context-parallel op to time beside")
    options = parser.parse_args()
    if not options.package:
        if not options.spec:
            parser.error('give --package or --spec')
        options.package = linac.compile(options.spec).path
    name = os.path.basename(options.spec or options.package).split('.')[0]
    context = mp.get_context('spawn')
    one = {}
    for world in (int(w) for w in options.world.split(',')):
        queue = context.SimpleQueue()
        with tempfile.TemporaryDirectory() as directory:
            mp.start_processes(
                rank_main, nprocs=world, start_method='spawn',
                args=(world, os.path.join(directory, 'store'), options,
                      queue))
        for impl, ms in queue.get().items():
            if world == 1:
                one[impl] = ms
            row = dict(layer=name, impl=impl,
                       device=options.device, tokens=options.tokens,
                       heads=options.heads, world=world, ms=round(ms, 3))
            if impl in one:
                row['efficiency'] = round(one[impl] / (world * ms), 3)
            print(json.dumps(row))


if __name__ == '__main__':
    main()
