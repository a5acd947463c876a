"""A spec as a torch.nn layer: the projections its inputs need, its
parameters and the output projection, with no other code.

    import linac.nn
    layer = linac.nn.Layer('examples/gated_deltanet.mlir', hidden_size=512,
                           num_heads=4)
    y, final_state = layer(x)                   # x [B, T, hidden_size]

Each input of the spec gets a projection of the hidden states by its kind:
a key [hidden, H * K], a value [hidden, H * V], a scalar [hidden, H] and a
matrix [hidden, H * K * V]; each parameter is a torch Parameter of its shape
([H], [H, K], ...), zero unless `param_init` gives a value or a function of
the tensor. The reads [B, T, H, V] go through an output projection [H * V,
hidden]. The layer compiles its spec for the device its inputs are on (a
cpu package on the CPU, sm_90a or sm_80 on CUDA devices), once per process
and cached on disk; `packages` maps targets to packages compiled elsewhere,
which it opens instead (then the spec may be None). The layer trains: its
gradients come from the package's backward pass, on the CPU or the CUDA
device.
"""

import os

import torch
from torch import nn

from . import InvalidArgument, load
from . import compile as compile_spec
from . import torch as linac_torch
from .torch import target_for

__all__ = ['Layer']


def _spec_text(spec):
    if '\n' not in spec and os.path.isfile(spec):
        with open(spec) as f:
            return f.read()
    return spec


class Layer(nn.Module):
    """A linear-attention layer from a spec (text or a path)."""

    def __init__(self, spec, hidden_size, num_heads, *, bias=False,
                 param_init=None, options=(), cache=None, packages=None,
                 device=None, dtype=None):
        super().__init__()
        self.spec = None if spec is None else _spec_text(spec)
        self.hidden_size, self.num_heads = hidden_size, num_heads
        self._options, self._cache = tuple(options), cache
        self._packages = {target: load(path)
                          for target, path in (packages or {}).items()}
        layer = (next(iter(self._packages.values())) if self._packages
                 else self.package('cpu'))
        self.key_dim, self.value_dim = layer.key_dim, layer.value_dim
        self.input_names, self.param_names = layer.inputs, layer.params
        sizes = {'key': (layer.key_dim,), 'value': (layer.value_dim,),
                 'scalar': (), 'matrix': (layer.key_dim, layer.value_dim)}
        self._input_shapes = {}
        self.projections = nn.ModuleDict()
        self.params = nn.ParameterDict()
        factory = {'device': device, 'dtype': dtype}
        param_init = dict(param_init or {})
        unknown = set(param_init) - set(layer.params)
        if unknown:
            raise InvalidArgument(
                f'param_init: {", ".join(sorted(unknown))} not a parameter of '
                f'@{layer.name} (parameters {", ".join(layer.params) or "none"})')
        for arg in layer.arguments:
            if arg.role == 'input':
                shape = sizes[arg.kind]
                self._input_shapes[arg.name] = shape
                width = num_heads
                for n in shape:
                    width *= n
                self.projections[arg.name] = nn.Linear(
                    hidden_size, width, bias=bias, **factory)
            elif arg.role == 'param':
                value = torch.zeros((num_heads,) + sizes[arg.kind],
                                    device=device, dtype=torch.float32)
                init = param_init.get(arg.name)
                if callable(init):
                    init(value)
                elif init is not None:
                    value.copy_(torch.as_tensor(init, dtype=torch.float32))
                self.params[arg.name] = nn.Parameter(value)
        self.output = nn.Linear(num_heads * layer.value_dim, hidden_size,
                                bias=bias, **factory)

    def package(self, device):
        """The compiled spec (a linac.Layer) that runs on `device`."""
        target = target_for(device)
        if target not in self._packages:
            if self.spec is None:
                raise InvalidArgument(
                    f'no package for {target} among '
                    f'{", ".join(self._packages)} and no spec to compile')
            self._packages[target] = compile_spec(
                self.spec, target=target, options=self._options,
                cache=self._cache)
        return self._packages[target]

    def _arguments(self, hidden_states):
        """The spec's inputs projected from [B, T, hidden], and its
        parameters, by name, as the package on their device takes them."""
        batch, tokens, _ = hidden_states.shape
        cpu = hidden_states.device.type == 'cpu'
        # A cpu package takes float32; CUDA packages the activations' dtype.
        dtype = torch.float32 if cpu else hidden_states.dtype
        tensors = {}
        for name in self.input_names:
            projected = self.projections[name](hidden_states)
            tensors[name] = projected.reshape(
                (batch, tokens, self.num_heads) +
                self._input_shapes[name]).to(dtype).contiguous()
        for name in self.param_names:
            tensors[name] = self.params[name].float().contiguous()
        return tensors

    def _check(self, hidden_states):
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.hidden_size:
            raise InvalidArgument(
                f'hidden_states has shape {list(hidden_states.shape)}; '
                f'expected [B, T, {self.hidden_size}]')

    def forward(self, hidden_states, *, initial_state=None,
                output_final_state=False, cu_seqlens=None, scale=None):
        """[B, T, hidden] to [B, T, hidden], and the final states [N, H, K,
        state columns] when output_final_state (else None)."""
        self._check(hidden_states)
        layer = self.package(hidden_states.device)
        reads, final_state = linac_torch.forward(
            layer, initial_state=initial_state, cu_seqlens=cu_seqlens,
            scale=scale, output_final_state=output_final_state,
            **self._arguments(hidden_states))
        batch, tokens, _ = hidden_states.shape
        reads = reads.reshape(batch, tokens, -1).to(hidden_states.dtype)
        return self.output(reads), final_state

    def step(self, hidden_states, *, state_pool, state_indices, scale=None):
        """A decode step: [B, n, hidden] new tokens of B sequences whose
        states live in `state_pool` [P, H, K, state columns] (float32,
        updated in place), sequence b in slot state_indices[b]."""
        self._check(hidden_states)
        layer = self.package(hidden_states.device)
        reads = linac_torch.decode(
            layer, state_pool=state_pool, state_indices=state_indices,
            scale=scale, **self._arguments(hidden_states))
        batch, tokens, _ = hidden_states.shape
        reads = reads.reshape(batch, tokens, -1).to(hidden_states.dtype)
        return self.output(reads)

    def extra_repr(self):
        return (f'hidden_size={self.hidden_size}, num_heads={self.num_heads}, '
                f'K={self.key_dim}, V={self.value_dim}')
