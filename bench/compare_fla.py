#!/usr/bin/env python3
"""Forward pass of our compiled packages against flash-linear-attention (FLA).

For each example spec with an FLA counterpart: draw random inputs in the
spec's raw parameterisation, run our package on them (bench/linac_cuda.py),
transform the same raw values into FLA's inputs exactly as the spec's body
does, run FLA's chunk op (forward only, no grad), compare outputs and final
states (relative error ||ours - fla|| / ||fla||, flagged above 2e-2), then
time both (CUDA events, warm-up, median of --runs, L2 flushed before each
run) on fresh inputs at the same shape. The copy and bf16 GEMM ceilings are
measured in the same run, and each case is set against its floor, the
larger of its minimum bytes at the copy ceiling and its FLOPs at the GEMM
ceiling (bench::floorMilliseconds). Prints one JSON line per case, then a table.

Timing: ours is one call on the raw inputs (gates, l2norm, sigmoid are in
the kernels). FLA's is its chunk op on the inputs prepared for it; the gate
and beta math that FLA fuses (use_qk_l2norm_in_kernel, use_gate_in_kernel,
use_beta_sigmoid_in_kernel) is inside its call, the rest (log gates, the
values scaled by a write strength) is done in torch before the timed call,
so FLA's time leaves that out. Both are timed without initial or final
state; the correctness check uses a random initial state and both final
states. The floor counts every raw input as stored (activations in the
dtype, parameters float32) plus the output, so gates count at 2 bytes in
bf16; the worked floors of docs/performance.md (the floor of a forward
pass) count FLA's key-vector log gates at 4 (--selftest shows both).

Setup, on the machine with the compiler:
  mkdir -p .fla && git --git-dir=<a flash-linear-attention clone>/.git \\
      archive HEAD fla LICENSE | tar -x -C .fla
  tests/gpu/prepare.sh     (every example compiled for sm_90a into .gpu-packages/)

On the GPU machine, with the working tree, .fla/, .gpu-packages/ and .deps/
copied there (FLA needs torch, triton, einops and transformers):
  cmake -G Ninja -S . -B build-gpu -DLINAC_RUNTIME_ONLY=ON \\
      -DCMAKE_PREFIX_PATH=$PWD/.deps && cmake --build build-gpu &&
  PYTHONPATH=$PWD/.fla python3 bench/compare_fla.py --packages .gpu-packages \\
      --lib build-gpu/lib/liblinac.so --examples linear_attention,gated_deltanet
Gated DeltaNet with 16 q/k heads shared by 64 value heads (FLA's GVA):
  ... -B 4 -T 8192 -H 64 --key-heads 16 --examples gated_deltanet
Every shape the forward is judged at, in one run and one table (every
example at B8 T4096 H16 and B1 T32768 H16, then Gated DeltaNet with 16 q/k
and 64 value heads at 4 x 8192 and 1 x 32768); --list prints those cases
without torch or a GPU:
  ... --suite
Forward plus backward, as a training step runs them, with each raw input's
gradient set against FLA's and the peak extra device memory of each (one
JSON line an example; a case FLA refuses says why):
  ... --backward --examples gated_deltanet,kda
Importing fla takes about 20 s, and FLA's Triton kernels compile and
autotune on an op's first call at each shape (25 to 50 s an op on an
H200). So that all eleven fit in a few minutes, the kernels are first
compiled in --warm-jobs processes side by side (into Triton's disk
cache); autotuning is not cached by them (TRITON_CACHE_AUTOTUNING=0), so
the timing run still tunes each op alone on an idle GPU.
bench/fla_mapping_check.py checks the example -> FLA mapping against a
float32 recurrence of the spec (all eleven agreed to 4e-3 in bf16 on an
H200).

python3 bench/compare_fla.py --selftest checks the floor formula against
the worked floors of docs/performance.md without torch or a GPU.
"""

import argparse
import concurrent.futures
import glob
import importlib
import json
import math
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Callable

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

torch = F = None  # imported in main(), so that --help and --selftest need no torch

K = V = 128  # every example spec fixes K = V = 128
FLAG = 2e-2  # relative error above which a case is flagged


# ---------------------------------------------------------------- the floor
def fwd_flops(k, v, c, erase):
    """FLOPs per token and head of a chunkwise forward pass, chunk c
    (docs/performance.md, the floor of a forward pass)."""
    return 6 * k * v + 4 * c * (k + v) + 2 / 3 * c * c if erase else 4 * k * v + 2 * c * (k + v)


def floor_ms(nbytes, flops, copy_tbps, gemm_tflops):
    """max(bytes / copy ceiling, FLOPs / GEMM ceiling), in ms."""
    return max(nbytes / (copy_tbps * 1e9), flops / (gemm_tflops * 1e9))


# ------------------------------------------------------------- the examples
def fla_op(module, name):
    """FLA's fla.ops.MODULE.NAME (importing fla also imports its layers and
    models, with transformers when that is installed)."""
    return getattr(importlib.import_module('fla.ops.' + module), name)


# FLA ops take [B, T, H, D] / [B, T, H] tensors, states [N, H, K, V] float32,
# log-space decays, scale default K^-1/2 (our default too); each prep function
# maps the raw inputs x to a call (initial_state, output_final_state) -> (o, ht).

def fla_linear_attention(x):
    # S += k v^T, o = K^-1/2 S^T q: chunk_linear_attn with its normaliser off.
    op = fla_op('linear_attn', 'chunk_linear_attn')
    return lambda h0, fin: op(x['q'], x['k'], x['v'], initial_state=h0, output_final_state=fin,
                              normalize=False)


def fla_retnet(x):
    # chunk_retention fixes the same gamma_h = 1 - 2^(-5-h), h the head index.
    op = fla_op('retention', 'chunk_retention')
    return lambda h0, fin: op(x['q'], x['k'], x['v'], initial_state=h0, output_final_state=fin)


def fla_mamba2(x):
    # Simple GLA (scalar log gate g = -exp(A_log) dt). FLA's own Mamba2 layer
    # calls mamba_ssm instead; the spec's write strength dt is folded into v
    # (v * dt rounded to the dtype, before the timed call), which is the same
    # math. Mamba2's D skip and output gate are outside the spec.
    op = fla_op('simple_gla', 'chunk_simple_gla')
    dt = F.softplus(x['dt'].float() + x['dt_bias'])
    g = -torch.exp(x['A_log']) * dt
    v = (x['v'].float() * dt[..., None]).to(x['v'].dtype)
    return lambda h0, fin: op(x['q'], x['k'], v, g=g, initial_state=h0, output_final_state=fin)


def _gla(x, k, g):
    op = fla_op('gla', 'chunk_gla')
    return lambda h0, fin: op(x['q'], k, x['v'], g, initial_state=h0, output_final_state=fin)


def fla_gla(x):
    # Log gate logsigmoid(g) / 16 in float32, as FLA's GLA layer computes it.
    return _gla(x, x['k'], F.logsigmoid(x['g'].float()) / 16)


def fla_gateloop(x):
    # Real-valued GateLoop is GLA with the log gate logsigmoid(g) (no / 16).
    return _gla(x, x['k'], F.logsigmoid(x['g'].float()))


def fla_hgrn2(x):
    # As FLA's HGRN2 layer: GLA with log gate log f and key 1 - f; the key is
    # rounded to the dtype for FLA (our kernel keeps it in float32).
    lb = x['lower_bound']
    f = lb + (1 - lb) * torch.sigmoid(x['g'].float())
    return _gla(x, (1 - f).to(x['q'].dtype), torch.log(f))


def fla_rwkv6(x):
    # Same recurrence (read before the write, bonus u, decay exp(-exp(w))),
    # scale 1 as the spec fixes; w goes in as the log decay -exp(w).
    op = fla_op('rwkv6', 'chunk_rwkv6')
    w = -torch.exp(x['w'].float())
    return lambda h0, fin: op(x['r'], x['k'], x['v'], w, x['u'], scale=1.0, initial_state=h0,
                              output_final_state=fin)


def fla_deltanet(x):
    # l2norm of q, k in FLA's call; beta = sigmoid(b) in float32 before it.
    op = fla_op('delta_rule', 'chunk_delta_rule')
    beta = torch.sigmoid(x['b'].float())
    return lambda h0, fin: op(x['q'], x['k'], x['v'], beta, initial_state=h0, output_final_state=fin,
                              use_qk_l2norm_in_kernel=True)


def fla_gated_deltanet(x):
    # Every transform in FLA's call: l2norm, g = -exp(A_log) softplus(g + dt_bias),
    # beta = sigmoid(b); FLA takes the same raw tensors.
    op = fla_op('gated_delta_rule', 'chunk_gated_delta_rule')
    return lambda h0, fin: op(x['q'], x['k'], x['v'], x['g'], x['b'], initial_state=h0,
                              output_final_state=fin, use_qk_l2norm_in_kernel=True,
                              use_gate_in_kernel=True, A_log=x['A_log'], dt_bias=x['dt_bias'],
                              use_beta_sigmoid_in_kernel=True)


def fla_kda(x):
    # As Gated DeltaNet with a key-vector gate; FLA wants dt_bias flat, [H * K].
    op = fla_op('kda', 'chunk_kda')
    return lambda h0, fin: op(x['q'], x['k'], x['v'], x['g'], x['b'], initial_state=h0,
                              output_final_state=fin, use_qk_l2norm_in_kernel=True,
                              use_gate_in_kernel=True, A_log=x['A_log'],
                              dt_bias=x['dt_bias'].reshape(-1), use_beta_sigmoid_in_kernel=True)


def fla_gdn2(x):
    # chunk_gdn2: S <- (I - k (b * k)^T) Diag(exp g) S + k (w * v)^T. FLA takes
    # b, w after the sigmoid (computed in float32, rounded to the dtype as
    # FLA's tests pass them); l2norm and gate in FLA's call.
    op = fla_op('gdn2', 'chunk_gdn2')
    dt = x['q'].dtype
    b, w = torch.sigmoid(x['b'].float()).to(dt), torch.sigmoid(x['w'].float()).to(dt)
    return lambda h0, fin: op(x['q'], x['k'], x['v'], x['g'], b, w, initial_state=h0,
                              output_final_state=fin, use_qk_l2norm_in_kernel=True,
                              use_gate_in_kernel=True, A_log=x['A_log'],
                              dt_bias=x['dt_bias'].reshape(-1))


# Raw values are drawn as f(z), z ~ N(0, 1) in float32 (f = identity unless
# named), then inputs are cast to the dtype. Log decays are brought near the
# logsigmoid(randn) / 16 of the FLA anchors (docs/performance.md, anchors):
# with A_log ~ -ln 16, -exp(A_log) softplus(z) is distributed as
# logsigmoid(z) / 16.
A_LOG = lambda z: 0.25 * z - math.log(16)  # noqa: E731
DT_BIAS = lambda z: 0.25 * z  # noqa: E731
GDN_DRAW = {'A_log': A_LOG, 'dt_bias': DT_BIAS}


@dataclass
class Example:
    inputs: dict  # name -> 'K' [B,T,H,K], 'V' [B,T,H,V] or '' [B,T,H]
    params: dict  # name -> 'K' [H,K] or '' [H], float32
    fla: Callable  # raw tensors -> (h0, final) -> (o, ht)
    erase: bool = False  # delta-rule FLOPs in the floor
    draw: dict = field(default_factory=dict)  # name -> f(z)
    grouped: bool = False  # FLA's op takes fewer q, k heads than v heads (GVA)


QKV = {'q': 'K', 'k': 'K', 'v': 'V'}
EXAMPLES = {
    'linear_attention': Example(QKV, {}, fla_linear_attention),
    'retnet': Example(QKV, {}, fla_retnet),
    'mamba2': Example({**QKV, 'dt': ''}, {'A_log': '', 'dt_bias': ''}, fla_mamba2, draw=GDN_DRAW),
    'gla': Example({**QKV, 'g': 'K'}, {}, fla_gla),
    'gateloop': Example({**QKV, 'g': 'K'}, {}, fla_gateloop,  # logsigmoid(z + 3) ~ -0.05
                        draw={'g': lambda z: z + 3}),
    'hgrn2': Example({'q': 'K', 'v': 'V', 'g': 'K'}, {'lower_bound': 'K'}, fla_hgrn2,
                     draw={'lower_bound': lambda z: 0.8 + 0.19 * torch.sigmoid(z)}),
    'rwkv6': Example({'r': 'K', 'k': 'K', 'v': 'V', 'w': 'K'}, {'u': 'K'}, fla_rwkv6,
                     draw={'w': lambda z: torch.log(F.softplus(z) / 16)}),  # -exp(w) ~ logsigmoid/16
    'deltanet': Example({**QKV, 'b': ''}, {}, fla_deltanet, erase=True),
    'gated_deltanet': Example({**QKV, 'g': '', 'b': ''}, {'A_log': '', 'dt_bias': ''},
                              fla_gated_deltanet, erase=True, draw=GDN_DRAW, grouped=True),
    'kda': Example({**QKV, 'g': 'K', 'b': ''}, {'A_log': '', 'dt_bias': 'K'}, fla_kda,
                   erase=True, draw=GDN_DRAW),
    'gdn2': Example({**QKV, 'g': 'K', 'b': 'K', 'w': 'V'}, {'A_log': '', 'dt_bias': 'K'}, fla_gdn2,
                    erase=True, draw=GDN_DRAW),
}
NO_FLA = {
    'gated_rfa': 'FLA has no op for it (simple GLA with (1 - a) folded into v would be the same '
                 'math, as for mamba2, but is no FLA op of gated RFA)',
    'mlstm': 'FLA has no mLSTM chunk op with the max(|n^T q|, 1) normaliser',
    'two_sided': 'FLA has no chunk op with a value-side decay',
    'low_rank_two_sided': 'FLA has no chunk op with a value-side decay',
    'full_matrix_gate': 'FLA has no op with a full matrix gate',
}


def dims(kind, B, T, H, param=False, key_heads=None):
    """An argument's shape: H state heads, or for key-side inputs (q, k)
    key_heads when a group of state heads shares each (FLA's GVA)."""
    d = {'K': (K,), 'V': (V,), '': ()}[kind]
    if param:
        return (H, *d)
    return (B, T, key_heads or H if kind == 'K' else H, *d)


def min_bytes(ex, B, T, H, itemsize, key_heads=None):
    """Bytes a forward pass must move: raw inputs as stored, parameters, output."""
    n = sum(math.prod(dims(kd, B, T, H, key_heads=key_heads)) for kd in ex.inputs.values())
    n += B * T * H * V
    return n * itemsize + 4 * sum(math.prod(dims(kd, B, T, H, True)) for kd in ex.params.values())


# --------------------------------------------------------------- measuring
def draw(ex, B, T, H, dtype, seed, key_heads=None):
    gen = torch.Generator(device='cuda').manual_seed(seed)
    x = {}
    for names, param in ((ex.inputs, False), (ex.params, True)):
        for name, kind in names.items():
            z = torch.randn(dims(kind, B, T, H, param, key_heads), generator=gen, device='cuda')
            x[name] = ex.draw.get(name, lambda z: z)(z).to(torch.float32 if param else dtype).contiguous()
    return x


def bench_ms(fn, runs, warmup):
    """Median of `runs` CUDA-event timings after `warmup` calls, L2 flushed before each."""
    for _ in range(warmup):
        fn()
    flush = torch.empty(256 << 20, dtype=torch.int8, device='cuda')
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(runs)]
    for start, end in events:
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in events)


def ceilings(runs, warmup):
    """(copy TB/s counting bytes read + written, bf16 8192^3 matmul TFLOP/s)."""
    src = torch.empty(2 << 30, dtype=torch.uint8, device='cuda')
    dst = torch.empty_like(src)
    copy = 2 * src.numel() / bench_ms(lambda: dst.copy_(src), runs, warmup) / 1e9
    del src, dst
    n = 8192
    a, b = (torch.randn(n, n, device='cuda', dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty_like(a)
    gemm = 2 * n ** 3 / bench_ms(lambda: torch.matmul(a, b, out=c), runs, warmup) / 1e9
    return copy, gemm


def rel_err(ours, ref):
    ref = ref.float()
    return ((ours.float() - ref).norm() / ref.norm()).item()


def shape_label(a):
    """B, T and the heads of a run's options, as the rows and --list name them."""
    heads = f'H{a.H}' + ('' if a.key_heads in (None, a.H) else f' (q, k {a.key_heads})')
    return f'B{a.B} T{a.T} {heads}'


def run_case(name, ex, pkg, a, dtype, copy, gemm):
    B, T, H, Hk = a.B, a.T, a.H, a.key_heads
    errs = {}
    if pkg is not None:  # correctness: fresh inputs, random initial state, final states
        x = draw(ex, B, T, H, dtype, seed=1, key_heads=Hk)
        h0 = torch.randn(B, H, K, V, device='cuda')
        o, ht = torch.empty(B, T, H, V, dtype=dtype, device='cuda'), torch.empty_like(h0)
        pkg.forward(x, o, initial_state=h0, final_state=ht)
        o_ref, ht_ref = ex.fla(x)(h0, True)
        errs = {'o': rel_err(o, o_ref), 'state': rel_err(ht, ht_ref)}
        del x, h0, o, ht, o_ref, ht_ref
    x = draw(ex, B, T, H, dtype, seed=2, key_heads=Hk)  # timing: fresh inputs, no states
    fla_ms = bench_ms(lambda f=ex.fla(x): f(None, False), a.runs, a.warmup)
    linac_ms = None
    if pkg is not None:
        linac_ms = bench_ms(pkg.bind(x, torch.empty(B, T, H, V, dtype=dtype, device='cuda')),
                            a.runs, a.warmup)
    floor = floor_ms(min_bytes(ex, B, T, H, x['v'].element_size(), Hk),
                     B * T * H * fwd_flops(K, V, a.chunk, ex.erase), copy, gemm)
    pct = lambda ms: ms and round(100 * floor / ms, 1)  # noqa: E731
    err = max(errs.values(), key=lambda e: (math.isnan(e), e)) if errs else None  # NaN wins
    return {'variant': name, 'shape': f'{shape_label(a)} K{K} V{V}', 'dtype': a.dtype,
            'linac_ms': linac_ms and round(linac_ms, 4), 'fla_ms': round(fla_ms, 4),
            'speedup': linac_ms and round(fla_ms / linac_ms, 3), 'floor_ms': round(floor, 4),
            'linac_pct_floor': pct(linac_ms), 'fla_pct_floor': pct(fla_ms),
            'rel_err': err, 'rel_err_o': errs.get('o'), 'rel_err_state': errs.get('state'),
            'flagged': err is not None and not err <= FLAG,
            'copy_tbps': round(copy, 3), 'gemm_tflops': round(gemm, 1)}


def run_backward_case(name, ex, pkg, a, dtype):
    """Forward plus backward (no states) of ours and FLA's, timed as one
    training step runs them, and each raw input's gradient of ours against
    FLA's (the worst relative error); peak extra device memory: ours the
    backward's workspace, FLA's the caching allocator's peak over the step
    less what it held before."""
    B, T, H, Hk = a.B, a.T, a.H, a.key_heads
    x = draw(ex, B, T, H, dtype, seed=3, key_heads=Hk)
    d_o = torch.randn(B, T, H, V, device='cuda').to(dtype)
    leaves = {n: t.clone().requires_grad_() for n, t in x.items()}

    def fla_step():
        for t in leaves.values():
            t.grad = None
        o, _ = ex.fla(leaves)(None, False)
        o.backward(d_o)

    with torch.enable_grad():
        fla_step()
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fla_step()
        torch.cuda.synchronize()
        fla_extra = torch.cuda.max_memory_allocated() - before
        fla_grads = {n: t.grad for n, t in leaves.items()}
        fla_ms = bench_ms(fla_step, a.runs, a.warmup)
    row = {'variant': name, 'shape': shape_label(a),
           'dtype': a.dtype, 'fla_ms': round(fla_ms, 4), 'fla_extra_mib': round(fla_extra / 2**20)}
    if pkg is None:
        return row
    out = torch.empty(B, T, H, V, dtype=dtype, device='cuda')
    grads = {n: torch.empty(t.shape, dtype=torch.float32, device='cuda') for n, t in x.items()}
    forward = pkg.bind(x, out)
    backward = pkg.bind_backward(x, d_o, grads)
    forward()
    backward()
    errs = {n: rel_err(grads[n], g) for n, g in fla_grads.items() if g is not None}
    linac_ms = bench_ms(lambda: (forward(), backward()), a.runs, a.warmup)
    worst = max(errs, key=lambda n: (math.isnan(errs[n]), errs[n]))
    row.update({'linac_ms': round(linac_ms, 4), 'speedup': round(fla_ms / linac_ms, 3),
                'linac_extra_mib': round(backward.workspace / 2**20),
                'worst_grad': worst, 'rel_err': errs[worst],
                'flagged': not errs[worst] <= FLAG})
    return row


# (B, T, H, q/k heads or None for H, the examples or None for every one)
SUITE = [(8, 4096, 16, None, None), (1, 32768, 16, None, None),
         (4, 8192, 64, 16, ('gated_deltanet',)), (1, 32768, 64, 16, ('gated_deltanet',))]


def shape_options(a):
    """The options of each shape this run times: a's own, or with --suite
    one copy of a per SUITE shape, its examples those of a it names."""
    if not a.suite:
        return [a]
    shapes = []
    for B, T, H, Hk, only in SUITE:
        o = argparse.Namespace(**vars(a))
        o.B, o.T, o.H, o.key_heads = B, T, H, Hk
        o.examples = ','.join(n for n in a.examples.split(',') if only is None or n in only)
        if o.examples:
            shapes.append(o)
    return shapes


def runnable(a):
    """The examples of a that have a case at its shape; prints why not for
    the others."""
    names = []
    for name in a.examples.split(','):
        why = skip_reason(name, a)
        if why:
            print(f'# skip {name} at {shape_label(a)}: {why}', flush=True)
        else:
            names.append(name)
    return names


def open_package(name, a):
    """Our package of example `name`, or None (then FLA is timed alone)."""
    import linac_cuda
    try:
        return linac_cuda.Package(os.path.join(a.packages, name + '.linac'), a.lib)
    except (OSError, linac_cuda.LinacError) as e:
        print(f'# {name}: no package ({e}); timing FLA alone', flush=True)
        return None


def skip_reason(name, a):
    """Why example `name` has no case at these options, or None."""
    if name not in EXAMPLES:
        return NO_FLA.get(name, 'no FLA counterpart')
    if a.key_heads not in (None, a.H) and not EXAMPLES[name].grouped:
        return "FLA's op takes as many q, k heads as v heads"
    return None


def warm_fla(names, a):
    """FLA's kernels for each example compiled in a process of its own,
    a.warm_jobs at a time, both as the check and as the timing call them."""
    env = {**os.environ, 'TRITON_CACHE_AUTOTUNING': '0'}
    def warm(name):
        cmd = [sys.executable, os.path.abspath(__file__), '--warm-only', '--examples', name,
               '-B', str(a.B), '-T', str(a.T), '-H', str(a.H), '--dtype', a.dtype]
        if a.key_heads:
            cmd += ['--key-heads', str(a.key_heads)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ['no output'])[-1]
            print(f'# {name}: warm-up failed ({last}); it compiles in the timing run', flush=True)
    with concurrent.futures.ThreadPoolExecutor(a.warm_jobs) as pool:
        list(pool.map(warm, names))


def table(rows):
    cols = [('variant', '%-17s', 'variant'), ('shape', '%-30s', 'shape'),
            ('linac_ms', '%9s', 'linac ms'),
            ('fla_ms', '%8s', 'FLA ms'), ('speedup', '%8s', 'speedup'),
            ('floor_ms', '%8s', 'floor'), ('linac_pct_floor', '%9s', 'linac %'),
            ('fla_pct_floor', '%7s', 'FLA %'), ('rel_err', '%9s', 'rel err')]
    fmt = lambda v: '-' if v is None else '%.3g' % v if isinstance(v, float) else str(v)  # noqa: E731
    print(' '.join(f % h for _, f, h in cols))
    for r in rows:
        print(' '.join(f % fmt(r[c]) for c, f, _ in cols) + ('  FLAGGED' if r['flagged'] else ''))


def selftest():
    """The floor against the worked floors of docs/performance.md (B8 T4096
    H16, C 64, 4.24 TB/s, 801 TFLOP/s), whose gates are stored as FLA takes
    them: key-vector log gates float32, scalar gates and strengths bf16."""
    N, H, C = 8 * 4096, 16, 64
    qkvo = N * H * 2 * (2 * K + 2 * V)
    for variant, gate_bytes, erase, want in [
            ('linear attention', 0, False, 0.127), ('GLA', 4 * K, False, 0.190),
            ('Gated DeltaNet', 4 + 2, True, 0.127), ('KDA', 4 * K + 2, True, 0.190),
            ('GDN-2', 4 * K + 2 * K + 2 * V, True, 0.253)]:
        got = floor_ms(qkvo + N * H * gate_bytes, N * H * fwd_flops(K, V, C, erase), 4.24, 801)
        assert round(got, 3) == want, (variant, got, want)
        print(f'{variant:17s} floor {got:.4f} ms (docs/performance.md: {want})')
    print('as this script counts them, bf16 raw inputs:')
    for name, ex in EXAMPLES.items():
        nbytes = min_bytes(ex, 8, 4096, H, 2)
        got = floor_ms(nbytes, N * H * fwd_flops(K, V, C, ex.erase), 4.24, 801)
        print(f'  {name:17s} {nbytes / 1e9:.3f} GB  floor {got:.4f} ms')
    assert abs(min_bytes(EXAMPLES['gated_deltanet'], 8, 4096, 16, 2) - (qkvo + N * H * 4) - 8 * H) < 1


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--packages', default='packages', help='folder holding NAME.linac/ per example')
    p.add_argument('--lib', help='liblinac.so (default: $LINAC_LIB, else newest under build*/)')
    p.add_argument('-B', type=int, default=8)
    p.add_argument('-T', type=int, default=4096)
    p.add_argument('-H', type=int, default=16, help='state (value) heads')
    p.add_argument('--key-heads', type=int,
                   help='q and k heads, each shared by H / key-heads state heads (default: H); '
                        'FLA takes that for gated_deltanet (GVA)')
    p.add_argument('--dtype', choices=['bf16', 'fp16', 'fp32'], default='bf16')
    specs = sorted(glob.glob(os.path.join(os.path.dirname(HERE), 'examples', '*.mlir')))
    p.add_argument('--examples', default=','.join(os.path.basename(f)[:-5] for f in specs),
                   help='comma-separated spec stems (default: every examples/*.mlir; those '
                        'with no FLA counterpart get a line saying so)')
    p.add_argument('--runs', type=int, default=100, help='timed runs (median; at least 50)')
    p.add_argument('--warmup', type=int, default=10)
    p.add_argument('--chunk', type=int, default=64, help='chunk size C in the floor FLOPs')
    p.add_argument('--warm-jobs', type=int, default=min(8, os.cpu_count() or 1),
                   help="processes compiling FLA's kernels side by side before timing (0: none)")
    p.add_argument('--warm-only', action='store_true', help=argparse.SUPPRESS)
    p.add_argument('--selftest', action='store_true', help='check the floor formula, no GPU')
    p.add_argument('--suite', action='store_true',
                   help='every shape the forward is judged at, in one run (overrides -B, -T, -H, '
                        '--key-heads)')
    p.add_argument('--list', action='store_true',
                   help='print the cases this run would time, then exit (no torch or GPU)')
    p.add_argument('--backward', action='store_true',
                   help='time forward plus backward instead, and compare gradients with FLA\'s')
    a = p.parse_args()
    if a.selftest:
        return selftest()
    if a.runs < 50:
        p.error('--runs must be at least 50')
    if a.key_heads is not None and (a.key_heads < 1 or a.H % a.key_heads):
        p.error('--key-heads must divide -H')
    if a.suite and a.backward:
        p.error('--suite times the forward only')
    shapes = [(o, runnable(o)) for o in shape_options(a)]
    if a.list:
        for o, names in shapes:
            print(f'{shape_label(o)}: {",".join(names) or "nothing"}')
        return

    global torch, F
    import torch
    import torch.nn.functional as F
    dtype = {'bf16': torch.bfloat16, 'fp16': torch.float16, 'fp32': torch.float32}[a.dtype]

    if a.warm_only:
        with torch.no_grad():
            for name in a.examples.split(','):
                x = draw(EXAMPLES[name], a.B, a.T, a.H, dtype, seed=1, key_heads=a.key_heads)
                EXAMPLES[name].fla(x)(torch.randn(a.B, a.H, K, V, device='cuda'), True)
                EXAMPLES[name].fla(x)(None, False)
            torch.cuda.synchronize()
        return
    if a.warm_jobs > 0:
        for o, names in shapes:
            warm_fla(names, o)

    if a.backward:
        (a, names), = shapes
        for name in names:
            pkg = open_package(name, a)
            try:
                print(json.dumps(run_backward_case(name, EXAMPLES[name], pkg, a, dtype)),
                      flush=True)
            except Exception as e:  # FLA refuses some backward passes
                print(f'# {name}: failed: {type(e).__name__}: {e}', flush=True)
            finally:
                torch.cuda.empty_cache()
        return
    rows = []
    with torch.no_grad():
        copy, gemm = ceilings(a.runs, a.warmup)
        print(f'# {torch.cuda.get_device_name()}: copy {copy:.3f} TB/s, bf16 GEMM {gemm:.1f} TFLOP/s',
              flush=True)
        for o, names in shapes:
            for name in names:
                pkg = open_package(name, o)
                try:
                    row = run_case(name, EXAMPLES[name], pkg, o, dtype, copy, gemm)
                except Exception as e:  # one case failing must not lose the others
                    print(f'# {name}: failed: {type(e).__name__}: {e}', flush=True)
                    continue
                finally:
                    torch.cuda.empty_cache()
                rows.append(row)
                print(json.dumps(row), flush=True)
    table(rows)


if __name__ == '__main__':
    main()
