"""Functions with the signatures and return values of flash-linear-attention's
(fla-core 0.6) ops, running linac layers.

Each call turns its flags and the tensors' head sizes into a spec, compiles
it once (cached; CPU tensors take a cpu package, CUDA tensors an sm_90a or
sm_80 one) and runs it through linac.torch. A flag or argument linac does
not support raises NotImplementedError naming it. Gates are log-decays as
FLA takes them; a layer's log-decay must be provably at most 0, so a
positive gate is taken as 0 (FLA's callers pass log-sigmoids and negated
softpluses, which are never positive).

Covered: chunk_gated_delta_rule and fused_recurrent_gated_delta_rule
(with a scalar gate g, in the kernel or not), chunk_kda and
fused_recurrent_kda (a gate per key channel, in the kernel or not),
chunk_gdn2 and fused_recurrent_gdn2 (channel-wise erase and write
strengths), chunk_delta_rule and fused_recurrent_delta_rule,
chunk_simple_gla, chunk_linear_attn (normalize=False), chunk_retention and
chunk_gla.

With the `fla` package importable, register_fla_backend() makes linac a
backend of FLA's dispatched ops (chunk_gated_delta_rule, chunk_kda), so
that FLA's own calls run linac where it takes them.
"""

import functools
import threading

import torch

from . import compile as _compile
from . import torch as _ops

_HEADER = '''!key = tensor<{K}xf32, #linac.key>
!value = tensor<{V}xf32, #linac.value>
!state = !linac.state<{K}x{V}>
'''


def _refuse(**unsupported):
    for name, value in unsupported.items():
        # By identity: `in` would compare a tensor elementwise.
        if value is not None and value is not False:
            shown = 'a tensor' if torch.is_tensor(value) else repr(value)
            raise NotImplementedError(
                f'linac.fla: {name}={shown} is not supported')


@functools.lru_cache(maxsize=None)
def _layer(spec, target):
    return _compile(spec, target)


@functools.lru_cache(maxsize=None)
def _delta_spec(K, V, gate, l2norm, beta_sigmoid, neg_eigval,
                gate_in_kernel=False, dt_bias=False, channel_strengths=False):
    """The delta rule under a log-decay `gate` (None, 'scalar' per token or
    'vector' per key channel): S <- exp(g) S, then erase and write along k
    with strength beta; o = scale S^T q. With gate_in_kernel, g is the raw
    gate and the log-decay -exp(A_log) softplus(g + dt_bias), A_log [H] and
    dt_bias (when given) of g's shape a head. With channel_strengths, the
    erase takes a key vector b and the write a value vector w instead of
    beta."""
    kind = {'scalar': 'f32', 'vector': '!key'}.get(gate)
    params = ''
    if gate_in_kernel:
        params = (' params(%A_log : f32' +
                  (f', %dt_bias : {kind}' if dt_bias else '') + ')')
    strengths = ('%b : !key, %w : !value' if channel_strengths
                 else '%beta : f32')
    lines = [_HEADER.format(K=K, V=V),
             'linac.layer @fla_delta_rule(%S : !state)',
             f'    inputs(%q : !key, %k : !key, %v : !value'
             f'{f", %g : {kind}" if gate else ""}, {strengths}){params} {{']
    q, k, beta, state = '%q', '%k', '%beta', '%S'
    if l2norm:
        lines += ['  %qn = linac.l2norm %q : !key', '  %kn = linac.l2norm %k : !key']
        q, k = '%qn', '%kn'
    if beta_sigmoid:
        lines.append(f'  %beta_s = linac.sigmoid {beta} : f32')
        beta = '%beta_s'
    if neg_eigval:
        lines += ['  %two = arith.constant 2.0 : f32',
                  f'  %beta_2 = arith.mulf {beta}, %two : f32']
        beta = '%beta_2'
    if gate and gate_in_kernel:
        raw = '%g'
        if dt_bias:
            lines.append(f'  %x = arith.addf %g, %dt_bias : {kind}')
            raw = '%x'
        lines += ['  %A = math.exp %A_log : f32',
                  f'  %sp = linac.softplus {raw} : {kind}']
        a = '%A'
        if gate == 'vector':
            lines.append('  %Ak = linac.broadcast %A : !key')
            a = '%Ak'
        lines += [f'  %Asp = arith.mulf {a}, %sp : {kind}',
                  f'  %log_a = arith.negf %Asp : {kind}',
                  f'  %S1 = linac.decay %S key(%log_a : {kind}) : !state']
        state = '%S1'
    elif gate:
        zero = 'dense<0.0> : !key' if gate == 'vector' else '0.0 : f32'
        lines += [f'  %zero = arith.constant {zero}',
                  f'  %log_a = arith.minimumf %g, %zero : {kind}',
                  f'  %S1 = linac.decay %S key(%log_a : {kind}) : !state']
        state = '%S1'
    erase, write = ((('%b', '!key'), ('%w', '!value')) if channel_strengths
                    else ((beta, 'f32'), (beta, 'f32')))
    lines += [f'  %S2 = linac.erase {state}, {k} strength({erase[0]} : {erase[1]}) : !state, !key',
              f'  %S3 = linac.write %S2, {k}, %v strength({write[0]} : {write[1]}) : !state, !key, !value',
              f'  %o = linac.read %S3, {q} : !state, !key -> !value',
              '  linac.yield %S3, %o : !state, !value', '}']
    return '\n'.join(lines) + '\n'


@functools.lru_cache(maxsize=None)
def _simple_gla_spec(K, V, gate, fixed_gate):
    """S <- exp(g) exp(g_gamma) S + k v^T; o = scale S^T q."""
    args = ', %g : f32' if gate else ''
    params = ' params(%g_gamma : f32)' if fixed_gate else ''
    lines = [_HEADER.format(K=K, V=V),
             'linac.layer @fla_simple_gla(%S : !state)',
             f'    inputs(%q : !key, %k : !key, %v : !value{args}){params} {{',
             '  %zero = arith.constant 0.0 : f32']
    state = '%S'
    for name in (['%g'] if gate else []) + (['%g_gamma'] if fixed_gate else []):
        bounded = f'{name}_le0'
        lines += [f'  {bounded} = arith.minimumf {name}, %zero : f32',
                  f'  %S_{name[1:]} = linac.decay {state} key({bounded} : f32) : !state']
        state = f'%S_{name[1:]}'
    lines += [f'  %S_w = linac.write {state}, %k, %v : !state, !key, !value',
              '  %o = linac.read %S_w, %q : !state, !key -> !value',
              '  linac.yield %S_w, %o : !state, !value', '}']
    return '\n'.join(lines) + '\n'


@functools.lru_cache(maxsize=None)
def _gla_spec(K, V):
    """S <- diag(exp(g)) S + k v^T, g a key vector; o = scale S^T q."""
    return '\n'.join([
        _HEADER.format(K=K, V=V),
        'linac.layer @fla_gla(%S : !state)',
        '    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {',
        '  %zero = arith.constant dense<0.0> : !key',
        '  %log_a = arith.minimumf %g, %zero : !key',
        '  %S1 = linac.decay %S key(%log_a : !key) : !state',
        '  %S2 = linac.write %S1, %k, %v : !state, !key, !value',
        '  %o = linac.read %S2, %q : !state, !key -> !value',
        '  linac.yield %S2, %o : !state, !value', '}']) + '\n'


# What a call of this thread does once its spec is built: run (None), or
# stop there, as supports() and prepare() ask.
_calls = threading.local()


class _Stopped(Exception):
    """Raised by _run when a call stops at its spec; holds the layer
    prepare() compiled, if any."""

    def __init__(self, layer=None):
        super().__init__()
        self.layer = layer


def _run(spec, tensors, scale, initial_state, output_final_state, cu_seqlens,
         cu_seqlens_cpu, state_v_first):
    q = tensors['q']
    stop = getattr(_calls, 'stop', None)
    if stop == 'check':
        _ops.target_for(q.device)
        raise _Stopped()
    if stop is not None:
        raise _Stopped(_layer(spec, stop))
    layer = _layer(spec, _ops.target_for(q.device))
    if initial_state is not None and state_v_first:
        initial_state = initial_state.transpose(-1, -2)
    cu = cu_seqlens_cpu if cu_seqlens_cpu is not None else cu_seqlens
    o, final = _ops._forward_arguments(
        layer, [tensors[name] for name in layer.inputs + layer.params],
        initial_state, cu, scale, output_final_state)
    if final is None or not state_v_first:
        return o, final
    return o, final.transpose(-1, -2)


def chunk_gated_delta_rule(q, k, v, g, beta, scale=None, initial_state=None,
                           output_final_state=False,
                           use_qk_l2norm_in_kernel=False,
                           use_beta_sigmoid_in_kernel=False,
                           allow_neg_eigval=False, state_v_first=False,
                           cu_seqlens=None, cu_seqlens_cpu=None,
                           chunk_indices=None, cp_context=None,
                           use_gate_in_kernel=False, A_log=None, dt_bias=None,
                           **kwargs):
    """Gated DeltaNet: q, k [B, T, H, K], v [B, T, HV, V], g and beta
    [B, T, HV]. Returns (o [B, T, HV, V], final state [N, HV, K, V] or
    None). With use_gate_in_kernel, g is the raw gate of -exp(A_log)
    softplus(g + dt_bias), A_log and dt_bias [HV]."""
    _refuse(chunk_indices=chunk_indices, cp_context=cp_context, **kwargs)
    return _gated_delta(q, k, v, g, beta, 'scalar', scale, initial_state,
                        output_final_state, use_qk_l2norm_in_kernel,
                        use_gate_in_kernel, A_log, dt_bias,
                        use_beta_sigmoid_in_kernel, allow_neg_eigval,
                        state_v_first, cu_seqlens, cu_seqlens_cpu)


def fused_recurrent_gated_delta_rule(q, k, v, g=None, gk=None, gv=None,
                                     beta=None, scale=None,
                                     initial_state=None,
                                     output_final_state=False,
                                     use_qk_l2norm_in_kernel=False,
                                     use_gate_in_kernel=False, A_log=None,
                                     dt_bias=None,
                                     use_beta_sigmoid_in_kernel=False,
                                     allow_neg_eigval=False,
                                     state_v_first=False, cu_seqlens=None,
                                     **kwargs):
    """As chunk_gated_delta_rule, for few tokens; beta defaults to ones.
    With use_gate_in_kernel, g is the raw gate of -exp(A_log) softplus(g +
    dt_bias), A_log and dt_bias [HV]."""
    _refuse(gk=gk, gv=gv, **kwargs)
    if beta is None:
        beta = torch.ones(v.shape[:3], dtype=v.dtype, device=v.device)
    return _gated_delta(q, k, v, g, beta, 'scalar' if g is not None else None,
                        scale, initial_state, output_final_state,
                        use_qk_l2norm_in_kernel, use_gate_in_kernel, A_log,
                        dt_bias, use_beta_sigmoid_in_kernel, allow_neg_eigval,
                        state_v_first, cu_seqlens, None)


def _shaped(tensor, shape):
    """`tensor` as a parameter of `shape` (linac.torch makes it float32)."""
    return tensor if tensor.shape == shape else tensor.reshape(shape)


def _gated_delta(q, k, v, g, beta, gate, scale, initial_state,
                 output_final_state, l2norm, gate_in_kernel, A_log, dt_bias,
                 beta_sigmoid, neg_eigval, state_v_first, cu_seqlens,
                 cu_seqlens_cpu, strengths=None):
    """The delta rule under `gate`, the gate in the kernel or not; with
    `strengths` (b, w) channel-wise erase and write strengths for beta."""
    if gate_in_kernel and A_log is None:
        raise NotImplementedError(
            'linac.fla: use_gate_in_kernel without A_log is not supported')
    if not gate_in_kernel:
        _refuse(A_log=A_log, dt_bias=dt_bias)
    spec = _delta_spec(q.shape[-1], v.shape[-1], gate, l2norm, beta_sigmoid,
                       neg_eigval, gate_in_kernel, dt_bias is not None,
                       strengths is not None)
    tensors = dict(q=q, k=k, v=v)
    if strengths is None:
        tensors['beta'] = beta
    else:
        tensors['b'], tensors['w'] = strengths
    if gate:
        tensors['g'] = g
    if gate_in_kernel:
        heads = A_log.shape[0]
        tensors['A_log'] = _shaped(A_log, (heads,))
        if dt_bias is not None:
            tensors['dt_bias'] = _shaped(
                dt_bias, (heads, q.shape[-1]) if gate == 'vector' else (heads,))
    return _run(spec, tensors, scale, initial_state, output_final_state,
                cu_seqlens, cu_seqlens_cpu, state_v_first)


def chunk_kda(q, k, v, g, beta, scale=None, initial_state=None,
              output_final_state=False, use_qk_l2norm_in_kernel=False,
              use_gate_in_kernel=False, use_beta_sigmoid_in_kernel=False,
              allow_neg_eigval=False, safe_gate=False, lower_bound=None,
              disable_recompute=False, return_intermediate_states=False,
              state_v_first=False, cu_seqlens=None, cu_seqlens_cpu=None,
              cp_context=None, A_log=None, dt_bias=None, **kwargs):
    """KDA: the delta rule under a log-decay per key channel, g [B, T, HV,
    K], beta [B, T, HV]; with use_gate_in_kernel, g is the raw gate of
    -exp(A_log) softplus(g + dt_bias), A_log [HV] and dt_bias [HV * K]."""
    _refuse(safe_gate=safe_gate, lower_bound=lower_bound,
            return_intermediate_states=return_intermediate_states,
            cp_context=cp_context, **kwargs)
    return _gated_delta(q, k, v, g, beta, 'vector', scale, initial_state,
                        output_final_state, use_qk_l2norm_in_kernel,
                        use_gate_in_kernel, A_log, dt_bias,
                        use_beta_sigmoid_in_kernel, allow_neg_eigval,
                        state_v_first, cu_seqlens, cu_seqlens_cpu)


def chunk_gdn2(q, k, v, g, b, w, scale=None, initial_state=None,
               output_final_state=False, use_qk_l2norm_in_kernel=False,
               use_gate_in_kernel=False, cu_seqlens=None, cu_seqlens_cpu=None,
               safe_gate=False, lower_bound=None, disable_recompute=False,
               return_intermediate_states=False, state_v_first=False,
               A_log=None, dt_bias=None, **kwargs):
    """GDN-2: S <- (I - k (b * k)^T) diag(exp(g)) S + k (w * v)^T, with a
    log-decay g and an erase strength b [B, T, H, K] and a write strength w
    [B, T, H, V] per channel; with use_gate_in_kernel, g is the raw gate
    of -exp(A_log) softplus(g + dt_bias), A_log [H] and dt_bias [H * K]."""
    _refuse(safe_gate=safe_gate, lower_bound=lower_bound,
            return_intermediate_states=return_intermediate_states, **kwargs)
    return _gated_delta(q, k, v, g, None, 'vector', scale, initial_state,
                        output_final_state, use_qk_l2norm_in_kernel,
                        use_gate_in_kernel, A_log, dt_bias, False, False,
                        state_v_first, cu_seqlens, cu_seqlens_cpu,
                        strengths=(b, w))


def fused_recurrent_gdn2(q, k, v, g, b, w, A_log=None, dt_bias=None,
                         scale=None, initial_state=None,
                         output_final_state=False,
                         use_qk_l2norm_in_kernel=False,
                         use_gate_in_kernel=False, lower_bound=None,
                         state_v_first=False, cu_seqlens=None, **kwargs):
    """As chunk_gdn2, for few tokens."""
    _refuse(lower_bound=lower_bound, **kwargs)
    return _gated_delta(q, k, v, g, None, 'vector', scale, initial_state,
                        output_final_state, use_qk_l2norm_in_kernel,
                        use_gate_in_kernel, A_log, dt_bias, False, False,
                        state_v_first, cu_seqlens, None, strengths=(b, w))


def fused_recurrent_kda(q, k, v, g, beta, A_log=None, dt_bias=None,
                        scale=None, initial_state=None,
                        output_final_state=False,
                        use_qk_l2norm_in_kernel=False,
                        use_gate_in_kernel=False,
                        use_beta_sigmoid_in_kernel=False,
                        allow_neg_eigval=False, lower_bound=None,
                        state_v_first=False, cu_seqlens=None, **kwargs):
    """As chunk_kda, for few tokens."""
    _refuse(lower_bound=lower_bound, **kwargs)
    return _gated_delta(q, k, v, g, beta, 'vector', scale, initial_state,
                        output_final_state, use_qk_l2norm_in_kernel,
                        use_gate_in_kernel, A_log, dt_bias,
                        use_beta_sigmoid_in_kernel, allow_neg_eigval,
                        state_v_first, cu_seqlens, None)


def chunk_delta_rule(q, k, v, beta, scale=None, initial_state=None,
                     output_final_state=False, use_qk_l2norm_in_kernel=False,
                     cu_seqlens=None, cu_seqlens_cpu=None, **kwargs):
    """DeltaNet: the delta rule with strength beta [B, T, H]."""
    _refuse(**kwargs)
    spec = _delta_spec(q.shape[-1], v.shape[-1], None,
                       use_qk_l2norm_in_kernel, False, False)
    return _run(spec, dict(q=q, k=k, v=v, beta=beta), scale, initial_state,
                output_final_state, cu_seqlens, cu_seqlens_cpu, False)


def fused_recurrent_delta_rule(q, k, v, beta=None, scale=None,
                               initial_state=None, output_final_state=False,
                               use_qk_l2norm_in_kernel=False, cu_seqlens=None):
    """As chunk_delta_rule, for few tokens; beta defaults to ones."""
    if beta is None:
        beta = torch.ones(q.shape[:3], dtype=q.dtype, device=q.device)
    return chunk_delta_rule(q, k, v, beta, scale=scale,
                            initial_state=initial_state,
                            output_final_state=output_final_state,
                            use_qk_l2norm_in_kernel=use_qk_l2norm_in_kernel,
                            cu_seqlens=cu_seqlens)


def chunk_simple_gla(q, k, v, g=None, g_gamma=None, scale=None,
                     initial_state=None, output_final_state=False,
                     state_v_first=False, cu_seqlens=None,
                     cu_seqlens_cpu=None, **kwargs):
    """Linear attention under a scalar log-decay per token (g [B, T, H]),
    per head (g_gamma [H]), both, or neither."""
    _refuse(**kwargs)
    spec = _simple_gla_spec(q.shape[-1], v.shape[-1], g is not None,
                            g_gamma is not None)
    tensors = dict(q=q, k=k, v=v)
    if g is not None:
        tensors['g'] = g
    if g_gamma is not None:
        tensors['g_gamma'] = g_gamma
    return _run(spec, tensors, scale, initial_state, output_final_state,
                cu_seqlens, cu_seqlens_cpu, state_v_first)


def chunk_linear_attn(q, k, v, scale=None, initial_state=None,
                      output_final_state=False, normalize=True,
                      cu_seqlens=None):
    """Linear attention: S <- S + k v^T; o = scale S^T q. FLA's default
    normalize=True divides by q^T (the sum of the keys), which no linac
    normaliser computes: it raises NotImplementedError; pass
    normalize=False."""
    _refuse(normalize=normalize)
    return chunk_simple_gla(q, k, v, scale=scale, initial_state=initial_state,
                            output_final_state=output_final_state,
                            cu_seqlens=cu_seqlens)


@functools.lru_cache(maxsize=None)
def _retention_decays(heads, device):
    """RetNet's log-decays log(1 - 2^(-5 - h)), made once a head count and
    device rather than by four kernels a call."""
    h = torch.arange(heads, dtype=torch.float32, device=device)
    return torch.log1p(-torch.pow(2.0, -5.0 - h))


def chunk_retention(q, k, v, scale=None, initial_state=None,
                    output_final_state=False, cu_seqlens=None, **kwargs):
    """RetNet: head h of q's H decays by 1 - 2^(-5 - h) a token."""
    _refuse(**kwargs)
    return chunk_simple_gla(q, k, v, g_gamma=_retention_decays(q.shape[2],
                                                               q.device),
                            scale=scale,
                            initial_state=initial_state,
                            output_final_state=output_final_state,
                            cu_seqlens=cu_seqlens)


def chunk_gla(q, k, v, g, scale=None, initial_state=None,
              output_final_state=False, state_v_first=False, cu_seqlens=None,
              cu_seqlens_cpu=None):
    """GLA: a log-decay per key channel, g [B, T, H, K]."""
    return _run(_gla_spec(q.shape[-1], v.shape[-1]), dict(q=q, k=k, v=v, g=g),
                scale, initial_state, output_final_state, cu_seqlens,
                cu_seqlens_cpu, state_v_first)


def _stop(stop, function, args, kwargs):
    _calls.stop = stop
    try:
        function(*args, **kwargs)
    except _Stopped as stopped:
        return stopped
    finally:
        _calls.stop = None
    raise AssertionError(f'{function.__name__} ran past its spec')


def supports(function, *args, **kwargs):
    """(True, None) when linac runs function(*args, **kwargs), one of this
    module's functions, else (False, why): FLA's verifier protocol. The
    call goes as far as its spec: nothing compiles and nothing runs."""
    try:
        _stop('check', function, args, kwargs)
    except (NotImplementedError, TypeError, ValueError) as error:
        return False, f'linac: {error}'
    return True, None


def prepare(function, *args, target, **kwargs):
    """Compiles, for `target`, the package that function(*args, **kwargs)
    would run, and returns it as a linac.Layer; runs nothing. Any tensors of
    the call's shapes do, on any device: a cache filled this way on a
    machine with the compiler serves the same calls on one without."""
    return _stop(target, function, args, kwargs).layer


# FLA's dispatched operations and the public functions of each that linac
# serves.
_FLA_OPERATIONS = {'gated_delta_rule': ('chunk_gated_delta_rule',),
                   'kda': ('chunk_kda',)}


def register_fla_backend(priority=1):
    """Registers linac with FLA's backend dispatch for the operations in
    _FLA_OPERATIONS, at `priority` (lower runs first; FLA's own backends
    take 3 and up). A call linac does not take (a flag it refuses) falls
    through to FLA's next backend. FLA_LINAC=0 in the environment turns it
    off. Returns the backend."""
    from fla.ops.backends import BackendRegistry, BaseBackend

    methods = {}
    for names in _FLA_OPERATIONS.values():
        for name in names:
            function = globals()[name]
            methods[name] = staticmethod(function)
            methods[name + '_verifier'] = staticmethod(
                functools.partial(supports, function))
    backend_type = type('LinacBackend', (BaseBackend,), dict(
        methods, backend_type='linac', package_name='linac',
        env_var='FLA_LINAC', default_enable=True, priority=priority,
        __doc__='linac as an FLA backend (linac.fla.register_fla_backend).'))
    backend = backend_type()
    for operation in _FLA_OPERATIONS:
        BackendRegistry.ensure_initialized(operation)
        registry = (BackendRegistry._registries.get(operation) or
                    BackendRegistry(operation))
        registry.register(backend)
    return backend
