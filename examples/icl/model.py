"""Models of linac layers that read a prompt's tokens (data.py) and
predict the query's label.

Each layer is a spec compiled by linac (`SPECS`, key and value size
`width`): linear attention, a scalar gate or a key-vector gate, each gate
sigmoid(g) of a projection g of the token. A model stacks `depth` of them
with residual connections on the tokens, and its prediction is the label
slot of the query's token, which starts at 0.
"""

import linac.nn
import torch
from torch import nn

# The three layers the study compares; {n} is the key and value size.
SPECS = {
    'linear': '''
!key = tensor<{n}xf32, #linac.key>
!value = tensor<{n}xf32, #linac.value>
!state = !linac.state<{n}x{n}>
linac.layer @linear(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value) {{
  %S1 = linac.write %S, %k, %v : !state, !key, !value
  %o = linac.read %S1, %q : !state, !key -> !value
  linac.yield %S1, %o : !state, !value
}}''',
    'scalar': '''
!key = tensor<{n}xf32, #linac.key>
!value = tensor<{n}xf32, #linac.value>
!state = !linac.state<{n}x{n}>
linac.layer @scalar_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : f32) {{
  %neg = arith.negf %g : f32
  %sp = linac.softplus %neg : f32
  %log_a = arith.negf %sp : f32
  %S1 = linac.decay %S key(%log_a : f32) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}}''',
    'vector': '''
!key = tensor<{n}xf32, #linac.key>
!value = tensor<{n}xf32, #linac.value>
!state = !linac.state<{n}x{n}>
linac.layer @vector_gate(%S : !state)
    inputs(%q : !key, %k : !key, %v : !value, %g : !key) {{
  %neg = arith.negf %g : !key
  %sp = linac.softplus %neg : !key
  %log_a = arith.negf %sp : !key
  %S1 = linac.decay %S key(%log_a : !key) : !state
  %S2 = linac.write %S1, %k, %v : !state, !key, !value
  %o = linac.read %S2, %q : !state, !key -> !value
  linac.yield %S2, %o : !state, !value
}}''',
}


class Model(nn.Module):
    """`depth` layers of `gate` ('linear', 'scalar' or 'vector') on
    tokens of `token_size`, predicting the label slot `label` of the last
    token."""

    def __init__(self, gate, token_size, label, depth=1, width=16,
                 cache=None):
        super().__init__()
        self.label = label
        spec = SPECS[gate].format(n=width)
        self.layers = nn.ModuleList(
            linac.nn.Layer(spec, hidden_size=token_size, num_heads=1,
                           bias=True, cache=cache)
            for _ in range(depth))
        # Layers start adding nothing, and gates open (sigmoid(4) = 0.98),
        # so that every model starts as linear attention that predicts 0.
        for layer in self.layers:
            nn.init.zeros_(layer.output.weight)
            nn.init.zeros_(layer.output.bias)
            if 'g' in layer.projections:
                nn.init.zeros_(layer.projections['g'].weight)
                nn.init.constant_(layer.projections['g'].bias, 4.0)

    def forward(self, tokens):
        """[B, T, token_size] to the predictions [B]."""
        z = tokens
        for layer in self.layers:
            z = z + layer(z)[0]
        return z[:, -1, self.label]
