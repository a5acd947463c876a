"""An fp64 token-by-token interpreter of a package's step program (the
manifest's `step`), in numpy: the Python tests' reference. It applies each
primitive as docs/design.md defines it, one token at a time."""

import json
import os

import numpy as np

UNARY = {
    'arith.negf': np.negative, 'math.exp': np.exp, 'math.exp2': np.exp2,
    'math.log': np.log, 'math.log2': np.log2, 'math.log1p': np.log1p,
    'math.sqrt': np.sqrt, 'math.rsqrt': lambda x: 1.0 / np.sqrt(x),
    'math.tanh': np.tanh, 'math.absf': np.abs,
    'linac.sigmoid': lambda x: 1.0 / (1.0 + np.exp(-x)),
    'linac.softplus': lambda x: np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0),
}
BINARY = {
    'arith.addf': np.add, 'arith.subf': np.subtract, 'arith.mulf': np.multiply,
    'arith.divf': np.divide, 'arith.maximumf': np.maximum,
    'arith.minimumf': np.minimum, 'math.powf': np.power,
}


def step_program(package):
    with open(os.path.join(package, 'manifest.json')) as f:
        return json.load(f)['step']


def run(program, inputs, params, initial_state=None, cu_seqlens=None,
        scale=None):
    """Outputs [B, T, H, V] and final states [N, H, K, V (+1)] of the step
    over inputs [B, T, H_arg, ...] and params [H_arg, ...], by name."""
    K, V = program['key_dim'], program['value_dim']
    normalized = program['normalized']
    kinds = [v['kind'] for v in program['values']]
    first = inputs[program['inputs'][0]['name']]
    B, T = first.shape[:2]
    H = max([inputs[a['name']].shape[2] for a in program['inputs']] +
            [params[a['name']].shape[0] for a in program['params']])
    flat = {n: np.asarray(x, np.float64).reshape((B * T,) + x.shape[2:])
            for n, x in inputs.items()}
    cu = (np.asarray(cu_seqlens) if cu_seqlens is not None
          else np.arange(B + 1) * T)
    N = len(cu) - 1
    columns = V + (1 if normalized else 0)
    output = np.zeros((B * T, H, V))
    final = np.zeros((N, H, K, columns))
    for n in range(N):
        for h in range(H):
            S = np.zeros((K, V))
            norm = np.zeros(K)
            if initial_state is not None:
                S = np.array(initial_state[n, h, :, :V], np.float64)
                if normalized:
                    norm = np.array(initial_state[n, h, :, V], np.float64)
            for t in range(cu[n], cu[n + 1]):
                values = [None] * len(kinds)
                values[program['state']] = (S, norm)
                for a in program['inputs']:
                    x = flat[a['name']][t]
                    values[a['value']] = x[h // (H // x.shape[0])]
                for a in program['params']:
                    x = np.asarray(params[a['name']], np.float64)
                    values[a['value']] = x[h // (H // x.shape[0])]
                for op in program['ops']:
                    apply(op, values, kinds, K, V, h, scale)
                y = program['yield']
                S, norm = values[y['state']]
                output[t, h] = values[y['output']]
            final[n, h, :, :V] = S
            if normalized:
                final[n, h, :, V] = norm
    return output.reshape(B, T, H, V), final


def apply(op, values, kinds, K, V, head, scale):
    name, ids, attrs = op['op'], op['operands'], op['attrs']

    def arg(i):
        return values[ids[i]] if i < len(ids) and ids[i] >= 0 else None

    result = None
    if name == 'linac.decay':
        (S, norm), gk, gv = arg(0), arg(1), arg(2)
        fk = np.exp(gk) * np.ones(K) if gk is not None else np.ones(K)
        fv = np.exp(gv) if gv is not None else np.ones(V)
        result = (S * fk[:, None] * fv[None, :], norm * fk)
    elif name == 'linac.matrix_gate':
        (S, norm), G = arg(0), arg(1)
        result = (S * np.exp(G), norm)
    elif name == 'linac.erase':
        (S, norm), k, strength = arg(0), arg(1), arg(2)
        e = strength * k
        result = (S - np.outer(k, e @ S), norm - k * (e @ norm))
    elif name == 'linac.write':
        (S, norm), k, v, strength = arg(0), arg(1), arg(2), arg(3)
        w = strength if strength is not None else 1.0
        beta = strength if strength is not None and np.ndim(strength) == 0 else 1.0
        result = (S + np.outer(k, w * v), norm + k * beta)
    elif name == 'linac.read':
        (S, norm), q = arg(0), arg(1)
        s = attrs.get('scale', scale or 1.0 / np.sqrt(K))
        qs = q * s
        result = S.T @ qs
        if attrs.get('normalized'):
            result = result / max(abs(norm @ qs), 1.0)
    elif name == 'linac.head_index':
        result = float(head)
    elif name == 'linac.l2norm':
        x = arg(0)
        result = x / np.sqrt(x @ x + attrs.get('eps', 1e-6))
    elif name == 'linac.dot':
        result = arg(0) @ arg(1)
    elif name in ('linac.broadcast', 'arith.constant'):
        size = {'key': K, 'value': V, 'matrix': (K, V), 'scalar': None}
        shape = size[kinds[op['result']]]
        x = arg(0) if name == 'linac.broadcast' else attrs['value']
        result = float(x) if shape is None else np.full(shape, float(x))
    elif name in UNARY:
        result = UNARY[name](arg(0))
    elif name in BINARY:
        result = BINARY[name](arg(0), arg(1))
    else:
        raise ValueError(f'reference: unknown op {name}')
    if 'result' in op:
        values[op['result']] = result
