#!/usr/bin/env python3
"""Check compare_fla.py's example -> FLA mapping against a float32 recurrence.

For each example with an FLA counterpart: draw raw inputs as compare_fla.py
does, run FLA through the same prep function, and step the normal form
S_t = (I - k e^T) Diag(exp gk) S_{t-1} + k u^T, o_t = scale S^T q
(RWKV-6: read before the step, plus its bonus) written out here from the
spec's body, from a random initial state. Reports the relative error of
FLA's output and final state; a wrong mapping shows as O(1). Needs a GPU,
torch and FLA on PYTHONPATH (see compare_fla.py):
  PYTHONPATH=$PWD/.fla python3 bench/fla_mapping_check.py [-T 256]
"""

import argparse
import math
import time

import compare_fla as cf
import torch
import torch.nn.functional as F

cf.torch, cf.F = torch, F


def normal_form(name, x):
    """Per-token q, k, u, log decay gk, erase vector e (or None) from raw x."""
    f = {n: t.float() for n, t in x.items()}
    l2 = lambda t: t / t.norm(dim=-1, keepdim=True)  # noqa: E731
    q, k, v, e, scale = f.get('q', f.get('r')), f.get('k'), f['v'], None, cf.K ** -0.5
    H = v.shape[2]
    gk = torch.zeros(v.shape[:3], device=v.device)
    if name == 'retnet':
        gk = gk + torch.log(1 - 2.0 ** (-5.0 - torch.arange(H, device=v.device)))
    if name == 'mamba2':
        dt = F.softplus(f['dt'] + f['dt_bias'])
        gk, v = -torch.exp(f['A_log']) * dt, v * dt[..., None]
    if name in ('gla', 'gateloop'):
        gk = F.logsigmoid(f['g']) / (16 if name == 'gla' else 1)
    if name == 'hgrn2':
        lb = f['lower_bound']
        fg = lb + (1 - lb) * torch.sigmoid(f['g'])
        gk, k = torch.log(fg), 1 - fg
    if name == 'rwkv6':
        gk, scale = -torch.exp(f['w']), 1.0
    if name in ('deltanet', 'gated_deltanet', 'kda', 'gdn2'):
        q, k = l2(q), l2(k)
        if name == 'gdn2':
            e, v = torch.sigmoid(f['b']) * k, torch.sigmoid(f['w']) * v
        else:
            beta = torch.sigmoid(f['b'])[..., None]
            e, v = beta * k, beta * v
        if name == 'gated_deltanet':
            gk = -torch.exp(f['A_log']) * F.softplus(f['g'] + f['dt_bias'])
        if name in ('kda', 'gdn2'):
            gk = -torch.exp(f['A_log'])[:, None] * F.softplus(f['g'] + f['dt_bias'])
    return q, k, v, gk, e, scale


def reference(name, x, h0):
    q, k, u, gk, e, scale = normal_form(name, x)
    if gk.dim() == 3:
        gk = gk[..., None].expand_as(k)
    S, outs = h0.clone(), []
    for t in range(q.shape[1]):
        qt, kt, ut = q[:, t], k[:, t], u[:, t]
        if name == 'rwkv6':  # o = S_{t-1}^T r + ((r * u) . k) v
            bonus = (qt * x['u'] * kt).sum(-1, keepdim=True) * ut
            outs.append(scale * torch.einsum('bhkv,bhk->bhv', S, qt) + bonus)
        S = S * torch.exp(gk[:, t])[..., None]
        if e is not None:
            S = S - kt[..., None] * torch.einsum('bhk,bhkv->bhv', e[:, t], S)[..., None, :]
        S = S + kt[..., None] * ut[..., None, :]
        if name != 'rwkv6':
            outs.append(scale * torch.einsum('bhkv,bhk->bhv', S, qt))
    return torch.stack(outs, 1), S


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument('-B', type=int, default=2)
    p.add_argument('-T', type=int, default=256)
    p.add_argument('-H', type=int, default=4)
    p.add_argument('--examples', default=','.join(cf.EXAMPLES))
    a = p.parse_args()
    worst = 0.0
    with torch.no_grad():
        for name in a.examples.split(','):
            x = cf.draw(cf.EXAMPLES[name], a.B, a.T, a.H, torch.bfloat16, seed=3)
            h0 = torch.randn(a.B, a.H, cf.K, cf.V, device='cuda')
            t0 = time.time()
            try:
                o, ht = cf.EXAMPLES[name].fla(x)(h0, True)
            except Exception as err:
                print(f'{name:17s} FLA failed: {type(err).__name__}: {err}')
                worst = math.inf
                continue
            o_ref, ht_ref = reference(name, x, h0)
            eo, es = cf.rel_err(o, o_ref), cf.rel_err(ht, ht_ref)
            worst = max(worst, eo, es)
            print(f'{name:17s} o {eo:.2e}  state {es:.2e}  ({time.time() - t0:.0f} s)'
                  + ('  WRONG' if max(eo, es) > cf.FLAG else ''), flush=True)
    print(f'worst {worst:.2e}')


if __name__ == '__main__':
    main()
