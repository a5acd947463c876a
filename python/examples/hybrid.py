"""A small hybrid language model: three linac layers to one softmax
attention layer, as the 3:1 hybrids of Qwen3.5 and Kimi Linear interleave
them. Any spec takes the linac layers' place; run it on the CPU, or on a
CUDA device where there is one:

    python python/examples/hybrid.py [--spec examples/gated_deltanet.mlir]
        [--device cuda] [--layers 8] [--tokens 256]

It builds the model, runs a forward pass over random tokens and prints the
logits' shape and the time a pass takes.
"""

import argparse
import os
import time

import torch
from torch import nn

import linac.nn

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Attention(nn.Module):
    """Causal softmax attention."""

    def __init__(self, hidden_size, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(hidden_size, 3 * hidden_size, bias=False)
        self.output = nn.Linear(hidden_size, hidden_size, bias=False)

    def forward(self, x):
        batch, tokens, hidden = x.shape
        q, k, v = self.qkv(x).reshape(batch, tokens, 3, self.num_heads,
                                      -1).permute(2, 0, 3, 1, 4)
        y = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.output(y.transpose(1, 2).reshape(batch, tokens, hidden))


class Block(nn.Module):
    """A pre-norm residual block: the mixer, then a gated MLP."""

    def __init__(self, mixer, hidden_size):
        super().__init__()
        self.mixer = mixer
        self.mixer_norm = nn.RMSNorm(hidden_size)
        self.mlp_norm = nn.RMSNorm(hidden_size)
        self.gate_up = nn.Linear(hidden_size, 4 * hidden_size, bias=False)
        self.down = nn.Linear(2 * hidden_size, hidden_size, bias=False)

    def forward(self, x):
        mixed = self.mixer(self.mixer_norm(x))
        x = x + (mixed[0] if isinstance(mixed, tuple) else mixed)
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)
        return x + self.down(nn.functional.silu(gate) * up)


class HybridModel(nn.Module):
    """Every fourth block softmax attention, the others linac layers of
    `spec`."""

    def __init__(self, spec, vocab_size=1024, hidden_size=256, num_heads=4,
                 num_layers=8, cache=None):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, hidden_size)
        self.blocks = nn.ModuleList(
            Block(Attention(hidden_size, num_heads) if i % 4 == 3 else
                  linac.nn.Layer(spec, hidden_size, num_heads, cache=cache),
                  hidden_size)
            for i in range(num_layers))
        self.norm = nn.RMSNorm(hidden_size)
        self.head = nn.Linear(hidden_size, vocab_size, bias=False)

    def forward(self, tokens):
        x = self.embed(tokens)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--spec', default=os.path.join(
        ROOT, 'examples', 'gated_deltanet.mlir'))
    parser.add_argument('--device', default='cpu')
    parser.add_argument('--layers', type=int, default=8)
    parser.add_argument('--hidden', type=int, default=256)
    parser.add_argument('--heads', type=int, default=4)
    parser.add_argument('--batch', type=int, default=2)
    parser.add_argument('--tokens', type=int, default=256)
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    dtype = torch.float32 if device.type == 'cpu' else torch.bfloat16
    model = HybridModel(args.spec, hidden_size=args.hidden,
                        num_heads=args.heads, num_layers=args.layers)
    model = model.to(device=device, dtype=dtype)
    tokens = torch.randint(0, 1024, (args.batch, args.tokens), device=device)
    with torch.no_grad():
        logits = model(tokens)
        start = time.perf_counter()
        logits = model(tokens)
        if device.type == 'cuda':
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    print(f'logits {list(logits.shape)} {logits.dtype}, finite: '
          f'{bool(torch.isfinite(logits).all())}, {elapsed * 1e3:.1f} ms a pass')
    return logits


if __name__ == '__main__':
    main()
