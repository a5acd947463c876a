#!/usr/bin/env python3
"""flash-linear-attention's decode beside the copy ceiling.

Times FLA's fused recurrent forward, FLA's serving path, at one new token
for each of B sequences, H heads, K = V = 128, bf16 activations and a
float32 state: Gated DeltaNet, KDA and GDN-2, with the same raw
parameterisation as our example specs (l2norm, the gate
-exp(A_log) softplus(g + dt_bias) and the sigmoids inside FLA's kernels).
KDA and GDN-2 read and write a state pool in place through
ssm_state_indices, as our decode does; FLA's Gated DeltaNet has no pool
path, so it reads the initial states and writes new final states, the same
bytes. Timing is compare_fla.py's: CUDA events, warm-up, the median of
--runs, L2 cleared before each run; the copy ceiling is measured in the
same run. The floor counts the state read and written once plus the
activations (inputs and output; docs/performance.md, the floor of a
decode step), as linac-gpu-check's decode table does,
so the two tables are comparable when they run on one machine in one call.

  PYTHONPATH=$PWD/.fla python3 bench/decode_fla.py --batches 64,256
"""

import argparse
import json

import torch

import compare_fla
from compare_fla import GDN_DRAW, bench_ms, ceilings, floor_ms

# compare_fla imports torch in its own main(); its timing helpers need it.
compare_fla.torch = torch

K = V = 128


def raw(shape, gen, dtype, f=lambda z: z):
    return f(torch.randn(shape, generator=gen, device='cuda')).to(dtype).contiguous()


def cases(B, H, dtype, gen):
    """name -> (timed call, activation bytes, state bytes)."""
    from fla.ops.gated_delta_rule.fused_recurrent import fused_recurrent_gated_delta_rule_fwd
    from fla.ops.gdn2.fused_recurrent import fused_recurrent_gdn2_fwd
    from fla.ops.kda.fused_recurrent import fused_recurrent_kda_fwd

    f32 = torch.float32
    scale = K ** -0.5
    q, k = raw((B, 1, H, K), gen, dtype), raw((B, 1, H, K), gen, dtype)
    v = raw((B, 1, H, V), gen, dtype)
    a_log = raw((H,), gen, f32, GDN_DRAW['A_log'])
    pool = torch.randn(B, H, K, V, generator=gen, device='cuda')
    indices = torch.arange(B - 1, -1, -1, device='cuda', dtype=torch.int32)
    state_bytes = pool.numel() * 4
    out_bytes = v.numel() * v.element_size()

    def nbytes(*ts):
        return sum(t.numel() * t.element_size() for t in ts) + out_bytes

    g1, b1 = raw((B, 1, H), gen, dtype), raw((B, 1, H), gen, dtype)
    dt1 = raw((H,), gen, f32, GDN_DRAW['dt_bias'])
    gdn = lambda: fused_recurrent_gated_delta_rule_fwd(  # noqa: E731
        q, k, v, g=g1, beta=b1, A_log=a_log, dt_bias=dt1, scale=scale, initial_state=pool,
        output_final_state=True, use_qk_l2norm_in_kernel=True,
        use_beta_sigmoid_in_kernel=True)

    gk = raw((B, 1, H, K), gen, dtype)
    dtk = raw((H * K,), gen, f32, GDN_DRAW['dt_bias'])
    kda = lambda: fused_recurrent_kda_fwd(  # noqa: E731
        q, k, v, gk, b1, A_log=a_log, dt_bias=dtk, scale=scale, initial_state=pool,
        inplace_final_state=True, ssm_state_indices=indices,
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
        use_beta_sigmoid_in_kernel=True)

    # FLA's GDN-2 takes b and w after the sigmoid (as compare_fla.py passes them).
    bk = torch.sigmoid(raw((B, 1, H, K), gen, f32)).to(dtype)
    wv = torch.sigmoid(raw((B, 1, H, V), gen, f32)).to(dtype)
    gdn2 = lambda: fused_recurrent_gdn2_fwd(  # noqa: E731
        q, k, v, gk, bk, wv, A_log=a_log, dt_bias=dtk, scale=scale,
        initial_state=pool,
        inplace_final_state=True, ssm_state_indices=indices,
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True)

    return {
        'gated_deltanet': (gdn, nbytes(q, k, v, g1, b1, a_log, dt1), state_bytes),
        'kda': (kda, nbytes(q, k, v, gk, b1, a_log, dtk), state_bytes),
        'gdn2': (gdn2, nbytes(q, k, v, gk, bk, wv, a_log, dtk), state_bytes),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('--batches', default='64,256')
    p.add_argument('-H', type=int, default=16)
    p.add_argument('--runs', type=int, default=100, help='timed runs (median; at least 50)')
    p.add_argument('--warmup', type=int, default=10)
    a = p.parse_args()
    copy, gemm = ceilings(a.runs, a.warmup)
    rows = []
    for B in (int(b) for b in a.batches.split(',')):
        gen = torch.Generator(device='cuda').manual_seed(B)
        for name, (fn, act_bytes, state_bytes) in cases(B, a.H, torch.bfloat16, gen).items():
            ms = bench_ms(fn, a.runs, a.warmup)
            nbytes = 2 * state_bytes + act_bytes
            floor = floor_ms(nbytes, 0, copy, gemm)
            rows.append((name, B, ms, floor))
            print(json.dumps({'variant': name, 'mode': 'decode', 'impl': 'fla',
                              'shape': {'B': B, 'T': 1, 'H': a.H, 'K': K, 'V': V},
                              'dtype': 'bfloat16', 'ms': ms, 'floor_ms': floor,
                              'pct_of_floor': 100 * floor / ms, 'copy_tb_per_s': copy,
                              'gemm_tflop_per_s': gemm}))
    print(f'\nFLA decode, one token, H{a.H} K=V={K}, fp32 state; copy {copy:.2f} TB/s')
    print(f'{"variant":16} {"batch":>6} {"ms":>9} {"floor ms":>9} {"of copy":>8}')
    for name, B, ms, floor in rows:
        print(f'{name:16} B{B:<5} {ms:9.4f} {floor:9.4f} {100 * floor / ms:7.1f}%')


if __name__ == '__main__':
    main()
