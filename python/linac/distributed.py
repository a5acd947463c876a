"""Context parallelism: a batch of sequences split over the ranks of a
torch.distributed process group by token, exactly.

Every transition of the normal form is affine in the state, so a rank's
slice of a sequence carries the state entering it to the state leaving it
as S_out = A(S_in) + S_local. S_local is the slice's state from zeros; A
is linear: without an erase it scales each entry (Gamma (.) S_in, Gamma
the product of every decay factor), with an erase and no value-side decay
it is a K x K product from the left (the product of the (I - k e^T) D
factors). A rank that lies inside one sequence finds both by the
package's pass without reads (Layer.states) where no gradient is kept,
else by running its slice from zeros and from the identity's column
blocks, A(X) = f(X) - f(0); a rank on which its last sequence starts sends
that sequence's state. The ranks exchange one state and one transition per
head in a single all-gather, whatever the sequences' lengths, and each
rank composes those of the ranks before it into the state its first
sequence enters with.

    ctx = linac.distributed.context(cu_seqlens, group=group)
    o, final = linac.distributed.forward(layer, ctx, q=q, k=k, v=v, ...)

Inputs are this rank's slice, [1, T_r, H, ...]; parameters, the initial
state and cu_seqlens are the whole batch's, the same on every rank. The
gradients flow back through the exchange (the package's backward pass on
each slice); a parameter's gradient is this rank's share, to be summed over
the ranks as data parallelism sums it.
"""

import math

import torch
import torch.distributed as dist

from . import InvalidArgument
from . import torch as linac_torch

__all__ = ['Context', 'context', 'forward']

# What a rank sends: nothing the next rank needs (its last sequence ends
# on it), the state as it is (the rank has no tokens), the state of a
# sequence that starts on it, or a transition and a local state.
_NOTHING, _PASS, _ABSOLUTE, _RELATIVE = 0, 1, 2, 3


class Context:
    """Where each rank's slice of the batch falls among its sequences.

    `cu_seqlens` are the batch's sequence offsets and `bounds` the ranks'
    token offsets (world + 1 of them), both over the whole batch."""

    def __init__(self, cu_seqlens, bounds, rank, group):
        self.cu_seqlens = cu_seqlens
        self.bounds = bounds
        self.rank = rank
        self.group = group
        self.begin, self.end = bounds[rank], bounds[rank + 1]
        # (sequence, first, end) of each sequence this rank holds tokens
        # of, the offsets within the slice.
        begin, end = self.begin, self.end
        self.pieces = [
            (i, max(lo, begin) - begin, min(hi, end) - begin)
            for i, (lo, hi) in enumerate(zip(cu_seqlens, cu_seqlens[1:]))
            if max(lo, begin) < min(hi, end)]
        self.entering = bool(self.pieces) and \
            cu_seqlens[self.pieces[0][0]] < self.begin
        self.leaving = bool(self.pieces) and \
            cu_seqlens[self.pieces[-1][0] + 1] > self.end

    @property
    def tokens(self):
        """This rank's tokens: T_r of its inputs [1, T_r, H, ...]."""
        return self.end - self.begin

    def sends(self, rank):
        """What `rank` sends the ranks after it."""
        other = Context(self.cu_seqlens, self.bounds, rank, self.group)
        if other.tokens == 0:
            return _PASS
        if not other.leaving:
            return _NOTHING
        return _RELATIVE if other.entering and len(other.pieces) == 1 \
            else _ABSOLUTE

    def ends_here(self, sequence):
        """Whether this rank returns the final state of `sequence`: the one
        holding its last token, or for an empty sequence the one holding
        the token at its offset (the last rank at the batch's end)."""
        lo, hi = self.cu_seqlens[sequence], self.cu_seqlens[sequence + 1]
        if lo < hi:
            return self.begin < hi <= self.end
        last = self.rank == len(self.bounds) - 2
        return self.begin <= lo < self.end or (last and lo == self.end)


def context(cu_seqlens, *, tokens=None, group=None):
    """The context of this rank of `group` (the default group when None)
    over a batch whose sequences start at `cu_seqlens` (N + 1 offsets).
    `tokens` gives each rank's count of tokens, in rank order; by default
    they are split evenly, the first ranks taking one more where the count
    does not divide."""
    cu = [int(x) for x in torch.as_tensor(cu_seqlens).reshape(-1).tolist()]
    if len(cu) < 2 or cu[0] != 0 or any(b < a for a, b in zip(cu, cu[1:])):
        raise InvalidArgument(f'cu_seqlens is {cu}; expected N + 1 >= 2 '
                              'nondecreasing offsets from 0')
    world = dist.get_world_size(group)
    total = cu[-1]
    if tokens is None:
        tokens = [total // world + (r < total % world) for r in range(world)]
    tokens = [int(t) for t in tokens]
    if len(tokens) != world or min(tokens) < 0 or sum(tokens) != total:
        raise InvalidArgument(
            f'tokens is {tokens}; expected {world} counts, one a rank, '
            f'that add up to the batch\'s {total}')
    bounds = [0]
    for count in tokens:
        bounds.append(bounds[-1] + count)
    return Context(cu, bounds, dist.get_rank(group), group)


class _Gather(torch.autograd.Function):
    """All-gathers `message` from every rank, started here and waited on
    by the caller (`pending`), so that work in between overlaps it. The
    gradient of each rank's message is the sum of every rank's gradient of
    its slot. The tensors after `pending` only tie the gather into the
    graph, so that every rank takes part in the backward exchange."""

    @staticmethod
    def forward(ctx, message, group, pending, *anchors):
        ctx.group = group
        out = message.new_empty((dist.get_world_size(group),) + message.shape)
        pending.append(dist.all_gather(list(out.unbind(0)), message,
                                       group=group, async_op=True))
        return out

    @staticmethod
    def backward(ctx, grad):
        grad = grad.contiguous().clone()
        dist.all_reduce(grad, group=ctx.group)
        return (grad[dist.get_rank(ctx.group)], None, None) + \
            (None,) * (len(ctx.needs_input_grad) - 3)


class _After(torch.autograd.Function):
    """`value` itself, with `gathered` among its inputs: the backward pass
    then reaches the gather on every rank, also where `value` does not
    depend on it (a rank no sequence enters)."""

    @staticmethod
    def forward(ctx, value, gathered):
        ctx.gathered = (gathered.shape, gathered.dtype)
        return value.view_as(value)

    @staticmethod
    def backward(ctx, grad):
        shape, dtype = ctx.gathered
        return grad, grad.new_zeros(shape, dtype=dtype)


def _transition_kind(layer):
    """How a slice's transition acts on the state: 'scale' (entry by entry)
    or 'left' (a K x K product)."""
    form = layer.normal_form
    if not form['chunkable']:
        # Outside the normal form the step may read the state into its
        # own operands or gate each entry before an erase: no transition
        # of either kind is known to carry a slice.
        raise InvalidArgument(
            f'@{layer.name} is outside the normal form (it runs as a '
            'recurrent scan), so its transition over a slice is not known '
            'to be a scaling or a K x K product: it cannot be split over '
            'ranks')
    if form['erase'] == 'none':
        return 'scale'
    if not form['value_decay']:
        return 'left'
    raise InvalidArgument(
        f'@{layer.name} has an erase under a value-side decay: its '
        'transition over a slice is neither a scaling nor a K x K product, '
        'so it cannot be split over ranks')


def forward(layer, context, *, initial_state=None, scale=None,
            output_final_state=False, **tensors):
    """The layer's forward pass over the batch `context` splits, this
    rank's part: inputs [1, T_r, H, ...] (this rank's tokens) and
    parameters by name, the batch's initial_state [N, H, K, C] or None.
    Returns this rank's output [1, T_r, H, V] and, with
    output_final_state, the final states [N, H, K, C] of the sequences
    whose last token is on this rank, zeros for the others (their sum over
    the ranks is every final state)."""
    kind = _transition_kind(layer)
    arguments = linac_torch._arguments(layer, tensors)
    count = len(layer.inputs)
    inputs, params = arguments[:count], arguments[count:]
    for name, t in zip(layer.inputs, inputs):
        if t.dim() < 2 or t.shape[0] != 1 or t.shape[1] != context.tokens:
            raise InvalidArgument(
                f"input '{name}' has shape {list(t.shape)}; expected this "
                f'rank\'s [1, {context.tokens}, ...]')
    first = inputs[0]
    device = first.device
    heads = linac_torch._heads(layer, list(arguments))
    sequences = len(context.cu_seqlens) - 1
    state_shape = (heads, layer.key_dim, layer.state_columns)
    if initial_state is not None and \
            tuple(initial_state.shape) != (sequences,) + state_shape:
        raise InvalidArgument(
            f'initial_state has shape {list(initial_state.shape)}; expected '
            f'{[sequences, *state_shape]}')

    def initial(sequence):
        if initial_state is None:
            return first.new_zeros(state_shape, dtype=torch.float32)
        return initial_state[sequence].to(device, torch.float32)

    # Without a gradient to keep, a cpu package's pass without reads gives
    # a slice's state and transition at the cost of its state updates;
    # a chunkable layer the plan runs as a scan has no such pass.
    needs_gradient = torch.is_grad_enabled() and any(
        t is not None and t.requires_grad
        for t in list(arguments) + [initial_state])
    by_state_pass = (device.type == 'cpu' and not needs_gradient
                     and layer.family != 'recurrent')

    def run(pieces, states, reads=True, transitions=False):
        """The output and final states of `pieces` (contiguous, of this
        slice) from `states`; without reads, the final states and, with
        `transitions`, the transitions instead (Layer.states)."""
        lo, hi = pieces[0][1], pieces[-1][2]
        cu = torch.tensor([p[1] - lo for p in pieces] + [hi - lo],
                          dtype=torch.int64)
        named = dict(zip(layer.inputs, (t[:, lo:hi] for t in inputs)),
                     **dict(zip(layer.params, params)))
        if reads:
            return linac_torch.forward(
                layer, initial_state=torch.stack(states),
                cu_seqlens=cu.to(device), scale=scale, **named)
        arrays = {n: t.detach().to(torch.float32).contiguous().numpy()
                  for n, t in named.items()}
        final, carried = layer.states(
            initial_state=torch.stack(states).numpy(), cu_seqlens=cu.numpy(),
            scale=scale, transitions=transitions, **arrays)
        return torch.from_numpy(final), \
            None if carried is None else torch.from_numpy(carried)

    transition_size = layer.key_dim * (layer.key_dim if kind == 'left'
                                       else layer.state_columns)
    message_size = 1 + heads * (math.prod(state_shape[1:]) + transition_size)
    pieces = context.pieces
    sends = context.sends(context.rank)
    # Each run's output by its first token in the slice.
    outputs, finals = {}, {}
    if sends == _RELATIVE:
        if by_state_pass:
            zeros = first.new_zeros(state_shape, dtype=torch.float32)
            local, transition = run(pieces, [zeros], reads=False,
                                    transitions=True)
        else:
            local, transition = _slice_transition(
                layer, kind, inputs, params, state_shape, scale)
        message = torch.cat([local.new_full((1,), float(sends)),
                             local.reshape(-1), transition.reshape(-1)])
    elif sends == _ABSOLUTE:
        # With the state pass, the piece's outputs come while the states
        # travel, with the middle's.
        last = pieces[-1]
        if by_state_pass:
            leaving, _ = run([last], [initial(last[0])], reads=False)
        else:
            outputs[last[1]], leaving = run([last], [initial(last[0])])
        message = torch.cat([leaving.new_full((1,), float(sends)),
                             leaving.reshape(-1),
                             leaving.new_zeros(heads * transition_size)])
    else:
        message = first.new_zeros(message_size, dtype=torch.float32)
        message[0] = float(sends)
    pending = []
    anchors = [t for t in arguments if t.requires_grad]
    if initial_state is not None and initial_state.requires_grad:
        anchors.append(initial_state)
    gathered = _Gather.apply(message, context.group, pending, *anchors)

    # The sequences that neither enter from nor leave to another rank run
    # while the states travel.
    entering = pieces[0] if context.entering else None
    middle = [p for p in pieces if p is not entering and p[1] not in outputs]
    if middle:
        outputs[middle[0][1]], final = run(
            middle, [initial(p[0]) for p in middle])
        for p, state in zip(middle, final):
            finals[p[0]] = state
    for work in pending:
        work.wait()
    if entering is not None:
        state = _entering_state(kind, gathered, context, state_shape,
                                transition_size)
        outputs[entering[1]], final = run([entering], [state])
        finals[entering[0]] = final[0]

    if len(outputs) == 1:
        output, = outputs.values()
    elif outputs:
        output = torch.cat([outputs[at] for at in sorted(outputs)], dim=1)
    else:
        output = first.new_empty((1, 0, heads, layer.value_dim))
    output = _After.apply(output, gathered)
    if not output_final_state:
        return output, None
    rows = []
    for sequence in range(sequences):
        if not context.ends_here(sequence):
            rows.append(first.new_zeros(state_shape, dtype=torch.float32))
        elif sequence in finals:
            rows.append(finals[sequence])
        else:
            rows.append(initial(sequence))
    return output, torch.stack(rows)


def _slice_transition(layer, kind, inputs, params, state_shape, scale):
    """The local state [H, K, C] and the transition ([H, K, C] factors or
    [H, K, K] matrices) of a slice inside one sequence: its final states
    from zeros and from X, for X all ones or the identity's column blocks,
    in one batched call."""
    heads, keys, columns = state_shape
    zeros = inputs[0].new_zeros(state_shape, dtype=torch.float32)
    if kind == 'scale':
        starts = [torch.ones_like(zeros)]
    else:
        identity = torch.eye(keys, dtype=torch.float32, device=zeros.device)
        starts = []
        for block in range(0, keys, columns):
            x = torch.zeros_like(zeros)
            width = min(columns, keys - block)
            x[:, :, :width] = identity[:, block:block + width]
            starts.append(x)
    runs = 1 + len(starts)
    _, final = linac_torch.forward(
        layer, initial_state=torch.stack([zeros] + starts), scale=scale,
        **dict(zip(layer.inputs, (t.expand(runs, *t.shape[1:]).contiguous()
                                  for t in inputs))),
        **dict(zip(layer.params, params)))
    local = final[0]
    if kind == 'scale':
        return local, final[1] - local
    columns_of = [final[1 + b] - local for b in range(len(starts))]
    matrix = torch.cat(columns_of, dim=2)[:, :, :keys]
    return local, matrix


def _entering_state(kind, gathered, context, state_shape, transition_size):
    """The state this rank's first sequence enters with: the last state a
    rank before it sent as it is, carried through each later rank's
    transition."""
    heads, keys, columns = state_shape
    size = heads * keys * columns
    state = None
    for rank in range(context.rank):
        sends = context.sends(rank)
        row = gathered[rank]
        local = row[1:1 + size].reshape(state_shape)
        if sends == _NOTHING:
            state = None
        elif sends == _ABSOLUTE:
            state = local
        elif sends == _RELATIVE:
            transition = row[1 + size:1 + size + heads * transition_size]
            if kind == 'scale':
                state = transition.reshape(state_shape) * state + local
            else:
                state = transition.reshape(heads, keys, keys) @ state + local
    return state
