"""linac.fla against flash-linear-attention's recurrences, written out here
token by token in fp64 numpy from FLA's definitions (not from linac's
specs), on CPU tensors."""

import os

import numpy as np
import pytest

torch = pytest.importorskip('torch')

import linac.fla


def unit(x):
    return x / np.sqrt((x * x).sum() + 1e-6)


def gated_delta(q, k, v, g, beta, scale, h0=None, l2norm=False, cu=None):
    """S <- exp(g) S (g a scalar or a key vector a token); S <- S + k (beta
    (v - S^T k))^T; o = scale S^T q, with q and k heads shared by groups of
    v's heads."""
    q, k, v, g, beta = (np.asarray(x, np.float64) for x in (q, k, v, g, beta))
    B, T, H, K = q.shape
    HV, V = v.shape[2], v.shape[3]
    cu = np.arange(B + 1) * T if cu is None else cu
    flat = [x.reshape((B * T,) + x.shape[2:]) for x in (q, k, v, g, beta)]
    o = np.zeros((B * T, HV, V))
    final = np.zeros((len(cu) - 1, HV, K, V))
    for n in range(len(cu) - 1):
        for hv in range(HV):
            h = hv // (HV // H)
            S = np.zeros((K, V)) if h0 is None else np.array(h0[n, hv], np.float64)
            for t in range(cu[n], cu[n + 1]):
                qt, kt = flat[0][t, h], flat[1][t, h]
                if l2norm:
                    qt, kt = unit(qt), unit(kt)
                decay = np.exp(flat[3][t, hv])
                # A scalar gate, or one per key channel (a row of S each).
                S = S * (decay[:, None] if decay.ndim else decay)
                u = flat[4][t, hv] * (flat[2][t, hv] - S.T @ kt)
                S = S + np.outer(kt, u)
                o[t, hv] = scale * (S.T @ qt)
            final[n, hv] = S
    return o.reshape(B, T, HV, V), final


def close(got, want, tolerance=1e-4):
    got = got.double().numpy()
    return np.linalg.norm(got - want) <= tolerance * np.linalg.norm(want)


def logsigmoid(shape):
    return torch.nn.functional.logsigmoid(torch.randn(shape))


def test_chunk_gated_delta_rule_with_its_flags():
    B, T, H, HV, K, V = 2, 40, 2, 4, 16, 32
    q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K)
    v, g, b = torch.randn(B, T, HV, V), logsigmoid((B, T, HV)), torch.randn(B, T, HV)
    h0 = torch.randn(B, HV, K, V)
    o, final = linac.fla.chunk_gated_delta_rule(
        q, k, v, g, b, scale=0.3, initial_state=h0, output_final_state=True,
        use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        allow_neg_eigval=True)
    beta = 2 * torch.sigmoid(b)
    want_o, want_final = gated_delta(q, k, v, g, beta, 0.3, h0.numpy(), True)
    assert close(o, want_o) and close(final, want_final)


def test_state_v_first_variable_lengths_and_no_final_state():
    T, H, K, V = 50, 2, 16, 16
    q, k, v = torch.randn(1, T, H, K), torch.randn(1, T, H, K), torch.randn(1, T, H, V)
    g, beta = logsigmoid((1, T, H)), torch.rand(1, T, H)
    cu = torch.tensor([0, 13, 13, 50], dtype=torch.int32)
    h0 = torch.randn(3, H, V, K)  # value-first
    o, final = linac.fla.chunk_gated_delta_rule(
        q, k, v, g, beta, initial_state=h0, output_final_state=True,
        state_v_first=True, cu_seqlens=cu)
    want_o, want_final = gated_delta(q, k, v, g, beta, K ** -0.5,
                                     h0.transpose(-1, -2).numpy(),
                                     cu=cu.numpy())
    assert close(o, want_o)
    assert close(final.transpose(-1, -2), want_final)
    _, none = linac.fla.chunk_gated_delta_rule(q, k, v, g, beta, cu_seqlens=cu)
    assert none is None


def test_chunk_gated_delta_rule_gradients():
    # Against autograd through FLA's recurrence in float64 torch ops.
    B, T, H, K, V = 1, 70, 2, 16, 16
    q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K) / 4
    v, g, beta = (torch.randn(B, T, H, V), logsigmoid((B, T, H)),
                  torch.rand(B, T, H))
    h0 = torch.randn(B, H, K, V)
    leaves = [x.clone().requires_grad_() for x in (q, k, v, g, beta, h0)]
    o, final = linac.fla.chunk_gated_delta_rule(
        *leaves[:5], scale=0.3, initial_state=leaves[5],
        output_final_state=True)
    d_o, d_final = torch.randn_like(o), torch.randn_like(final)
    ((o * d_o).sum() + (final * d_final).sum()).backward()

    wide = [x.double().requires_grad_() for x in (q, k, v, g, beta, h0)]
    wq, wk, wv, wg, wbeta, wh0 = wide
    outputs, finals = [], []
    for h in range(H):
        S = wh0[0, h]
        for t in range(T):
            key = wk[0, t, h]
            S = S * torch.exp(wg[0, t, h])
            S = S + torch.outer(key, wbeta[0, t, h] * (wv[0, t, h] - S.T @ key))
            outputs.append(0.3 * (S.T @ wq[0, t, h]))
        finals.append(S)
    want_o = torch.stack(outputs).reshape(1, H, T, V).transpose(1, 2)
    want_final = torch.stack(finals).reshape(1, H, K, V)
    ((want_o * d_o.double()).sum() +
     (want_final * d_final.double()).sum()).backward()
    for got, want in zip(leaves, wide):
        assert close(got.grad, want.grad.numpy())


def test_fused_recurrent_continues_a_chunk_pass():
    B, T, H, K, V = 2, 9, 2, 16, 16
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    g, beta = logsigmoid((B, T, H)), torch.rand(B, T, H)
    o, final = linac.fla.chunk_gated_delta_rule(q, k, v, g, beta,
                                                output_final_state=True)
    _, state = linac.fla.chunk_gated_delta_rule(
        q[:, :8], k[:, :8], v[:, :8], g[:, :8], beta[:, :8],
        output_final_state=True)
    o_last, final_last = linac.fla.fused_recurrent_gated_delta_rule(
        q[:, 8:], k[:, 8:], v[:, 8:], g=g[:, 8:], beta=beta[:, 8:],
        initial_state=state, output_final_state=True)
    assert torch.allclose(o_last, o[:, 8:], rtol=1e-4, atol=1e-5)
    assert torch.allclose(final_last, final, rtol=1e-4, atol=1e-5)


def test_chunk_delta_rule():
    B, T, H, K, V = 1, 30, 2, 16, 16
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    beta = torch.rand(B, T, H)
    o, final = linac.fla.chunk_delta_rule(q, k, v, beta, output_final_state=True,
                                          use_qk_l2norm_in_kernel=True)
    want_o, want_final = gated_delta(q, k, v, torch.zeros(B, T, H), beta,
                                     K ** -0.5, l2norm=True)
    assert close(o, want_o) and close(final, want_final)


def test_fused_recurrent_delta_rule_takes_unit_strengths_by_default():
    B, T, H, K, V = 2, 5, 2, 16, 8
    q, v = torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K), dim=-1)
    h0 = torch.randn(B, H, K, V)
    o, final = linac.fla.fused_recurrent_delta_rule(
        q, k, v, scale=0.5, initial_state=h0, output_final_state=True)
    want_o, want_final = gated_delta(q, k, v, torch.zeros(B, T, H),
                                     torch.ones(B, T, H), 0.5, h0.numpy())
    assert close(o, want_o) and close(final, want_final)


@pytest.mark.parametrize('gates', ['g', 'g_gamma', 'both', 'neither'])
def test_chunk_simple_gla(gates):
    B, T, H, K, V = 2, 35, 2, 16, 16
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    g = logsigmoid((B, T, H)) if gates in ('g', 'both') else None
    g_gamma = -torch.rand(H) if gates in ('g_gamma', 'both') else None
    o, final = linac.fla.chunk_simple_gla(q, k, v, g=g, g_gamma=g_gamma,
                                          output_final_state=True)
    log_a = torch.zeros(B, T, H)
    if g is not None:
        log_a = log_a + g
    if g_gamma is not None:
        log_a = log_a + g_gamma
    # The delta rule with beta = 0 erases and writes nothing: write v by hand.
    want_o = np.zeros((B, T, H, V))
    want_final = np.zeros((B, H, K, V))
    for b in range(B):
        for h in range(H):
            S = np.zeros((K, V))
            for t in range(T):
                S = S * np.exp(float(log_a[b, t, h]))
                S = S + np.outer(k[b, t, h].double().numpy(), v[b, t, h].double().numpy())
                want_o[b, t, h] = K ** -0.5 * (S.T @ q[b, t, h].double().numpy())
            want_final[b, h] = S
    assert close(o, want_o) and close(final, want_final)


def decayed_linear_attention(q, k, v, log_a, scale, h0=None):
    """S <- diag(exp(log_a)) S + k v^T (log_a broadcast over the key
    channels); o = scale S^T q."""
    q, k, v, log_a = (np.asarray(x, np.float64) for x in (q, k, v, log_a))
    B, T, H, K = q.shape
    V = v.shape[-1]
    log_a = np.broadcast_to(log_a.reshape(B, T, H, -1), (B, T, H, K))
    o = np.zeros((B, T, H, V))
    final = np.zeros((B, H, K, V))
    for b in range(B):
        for h in range(H):
            S = np.zeros((K, V)) if h0 is None else np.array(h0[b, h], np.float64)
            for t in range(T):
                S = np.exp(log_a[b, t, h])[:, None] * S + np.outer(k[b, t, h], v[b, t, h])
                o[b, t, h] = scale * (S.T @ q[b, t, h])
            final[b, h] = S
    return o, final


def test_chunk_retention_decays_each_head_by_its_gamma():
    B, T, H, K, V = 1, 30, 4, 16, 16
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    o, final = linac.fla.chunk_retention(q, k, v, output_final_state=True)
    gamma = 1 - 2.0 ** (-5.0 - np.arange(H))
    log_a = np.broadcast_to(np.log(gamma), (B, T, H))
    want_o, want_final = decayed_linear_attention(q, k, v, log_a, K ** -0.5)
    assert close(o, want_o) and close(final, want_final)


def test_chunk_gla_with_a_gate_per_key_channel():
    B, T, H, K, V = 2, 33, 2, 16, 32
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    g = logsigmoid((B, T, H, K))
    h0 = torch.randn(B, H, K, V)
    o, final = linac.fla.chunk_gla(q, k, v, g, scale=0.5, initial_state=h0,
                                   output_final_state=True)
    want_o, want_final = decayed_linear_attention(q, k, v, g, 0.5, h0.numpy())
    assert close(o, want_o) and close(final, want_final)


def test_unsupported_flags_are_named():
    q = torch.randn(1, 4, 1, 16)
    g, beta = logsigmoid((1, 4, 1)), torch.rand(1, 4, 1)
    with pytest.raises(NotImplementedError, match='cp_context'):
        linac.fla.chunk_gated_delta_rule(q, q, q, g, beta, cp_context=object())
    with pytest.raises(NotImplementedError, match='use_gate_in_kernel'):
        linac.fla.fused_recurrent_gated_delta_rule(q, q, q, g=g, beta=beta,
                                                   use_gate_in_kernel=True)
    with pytest.raises(NotImplementedError, match='head_first'):
        linac.fla.chunk_simple_gla(q, q, q, g=g, head_first=True)


def softplus(x):
    return torch.nn.functional.softplus(x.double())


def test_chunk_kda_with_its_flags():
    B, T, H, HV, K, V = 2, 40, 2, 4, 16, 8
    q, k = torch.randn(B, T, H, K), torch.randn(B, T, H, K)
    v, b = torch.randn(B, T, HV, V), torch.randn(B, T, HV)
    g = logsigmoid((B, T, HV, K))
    h0 = torch.randn(B, HV, K, V)
    o, final = linac.fla.chunk_kda(
        q, k, v, g, b, scale=0.3, initial_state=h0, output_final_state=True,
        use_qk_l2norm_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        allow_neg_eigval=True)
    want_o, want_final = gated_delta(q, k, v, g, 2 * torch.sigmoid(b), 0.3,
                                     h0.numpy(), True)
    assert close(o, want_o) and close(final, want_final)


def test_kda_gate_in_the_kernel():
    B, T, H, K, V = 1, 30, 2, 16, 16
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    raw, beta = torch.randn(B, T, H, K), torch.rand(B, T, H)
    A_log, dt_bias = torch.randn(H), torch.randn(H * K)
    log_a = -torch.exp(A_log.double())[:, None] * softplus(
        raw + dt_bias.view(H, K))
    want_o, want_final = gated_delta(q, k, v, log_a, beta, K ** -0.5)
    for run in (linac.fla.chunk_kda, linac.fla.fused_recurrent_kda):
        o, final = run(q, k, v, raw, beta, A_log=A_log, dt_bias=dt_bias,
                       use_gate_in_kernel=True, output_final_state=True)
        assert close(o, want_o) and close(final, want_final)


def test_gated_delta_rule_gate_in_the_kernel():
    B, T, H, K, V = 2, 6, 2, 16, 16
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    raw, beta = torch.randn(B, T, H), torch.rand(B, T, H)
    A_log, dt_bias = torch.randn(H), torch.randn(H)
    log_a = -torch.exp(A_log.double()) * softplus(raw + dt_bias)
    want_o, want_final = gated_delta(q, k, v, log_a, beta, K ** -0.5)
    for run in (linac.fla.chunk_gated_delta_rule,
                linac.fla.fused_recurrent_gated_delta_rule):
        o, final = run(q, k, v, raw, beta=beta, A_log=A_log, dt_bias=dt_bias,
                       use_gate_in_kernel=True, output_final_state=True)
        assert close(o, want_o) and close(final, want_final)


def test_kda_refuses_what_it_does_not_support():
    q = k = v = torch.randn(1, 4, 1, 16)
    g, beta = logsigmoid((1, 4, 1, 16)), torch.rand(1, 4, 1)
    with pytest.raises(NotImplementedError, match='safe_gate'):
        linac.fla.chunk_kda(q, k, v, g, beta, safe_gate=True, lower_bound=-5.0)
    with pytest.raises(NotImplementedError, match='without A_log'):
        linac.fla.chunk_kda(q, k, v, g, beta, use_gate_in_kernel=True)
    with pytest.raises(NotImplementedError, match='A_log'):
        linac.fla.chunk_kda(q, k, v, g, beta, A_log=torch.zeros(1))


def test_chunk_linear_attn_without_normalize():
    B, T, H, K, V = 2, 33, 2, 16, 8
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    h0 = torch.randn(B, H, K, V)
    o, final = linac.fla.chunk_linear_attn(q, k, v, scale=0.5, initial_state=h0,
                                           output_final_state=True,
                                           normalize=False)
    S = h0.double().clone()
    want_o = torch.zeros(B, T, H, V, dtype=torch.float64)
    for t in range(T):
        S = S + torch.einsum('bhk,bhv->bhkv', k[:, t].double(), v[:, t].double())
        want_o[:, t] = 0.5 * torch.einsum('bhkv,bhk->bhv', S, q[:, t].double())
    assert close(o, want_o.numpy()) and close(final, S.numpy())
    with pytest.raises(NotImplementedError, match='normalize=True'):
        linac.fla.chunk_linear_attn(q, k, v)


def test_chunk_gdn2_with_channel_strengths():
    B, T, H, K, V = 2, 35, 2, 16, 8
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    raw = torch.randn(B, T, H, K)
    b, w = 2 * torch.rand(B, T, H, K), torch.rand(B, T, H, V)
    A_log, dt_bias = torch.randn(H), torch.randn(H * K)
    h0 = torch.randn(B, H, K, V)
    o, final = linac.fla.chunk_gdn2(q, k, v, raw, b, w, scale=0.4,
                                    initial_state=h0, output_final_state=True,
                                    use_qk_l2norm_in_kernel=True,
                                    use_gate_in_kernel=True, A_log=A_log,
                                    dt_bias=dt_bias)
    log_a = (-torch.exp(A_log.double())[:, None] *
             softplus(raw + dt_bias.view(H, K))).numpy()
    qd, kd, vd = (x.double().numpy() for x in (q, k, v))
    bd, wd = b.double().numpy(), w.double().numpy()
    want_o = np.zeros((B, T, H, V))
    want_final = np.zeros((B, H, K, V))
    for n in range(B):
        for h in range(H):
            S = h0[n, h].double().numpy()
            for t in range(T):
                qt, kt = unit(qd[n, t, h]), unit(kd[n, t, h])
                S = np.exp(log_a[n, t, h])[:, None] * S
                S = S - np.outer(kt, (bd[n, t, h] * kt) @ S)
                S = S + np.outer(kt, wd[n, t, h] * vd[n, t, h])
                want_o[n, t, h] = 0.4 * (S.T @ qt)
            want_final[n, h] = S
    assert close(o, want_o) and close(final, want_final)
    with pytest.raises(NotImplementedError, match='lower_bound'):
        linac.fla.chunk_gdn2(q, k, v, raw, b, w, lower_bound=-5.0)


def test_fused_recurrent_gdn2_continues_a_chunk_pass():
    B, T, H, K, V = 2, 20, 2, 16, 8
    q, k, v = torch.randn(B, T, H, K), torch.randn(B, T, H, K), torch.randn(B, T, H, V)
    g = logsigmoid((B, T, H, K))
    b, w = 2 * torch.rand(B, T, H, K), torch.rand(B, T, H, V)
    flags = dict(use_qk_l2norm_in_kernel=True, output_final_state=True)
    o, final = linac.fla.chunk_gdn2(q, k, v, g, b, w, **flags)
    _, state = linac.fla.chunk_gdn2(q[:, :17], k[:, :17], v[:, :17],
                                    g[:, :17], b[:, :17], w[:, :17], **flags)
    o_last, final_last = linac.fla.fused_recurrent_gdn2(
        q[:, 17:], k[:, 17:], v[:, 17:], g[:, 17:], b[:, 17:], w[:, 17:],
        initial_state=state, **flags)
    assert torch.allclose(o_last, o[:, 17:], rtol=1e-4, atol=1e-5)
    assert torch.allclose(final_last, final, rtol=1e-4, atol=1e-5)


def test_supports_answers_as_an_fla_verifier():
    q = torch.randn(1, 4, 1, 16)
    g, beta = logsigmoid((1, 4, 1)), torch.rand(1, 4, 1)
    run = linac.fla.chunk_gated_delta_rule
    assert linac.fla.supports(run, q, q, q, g, beta, scale=0.5) == (True, None)
    accepted, why = linac.fla.supports(run, q, q, q, g, beta,
                                       cp_context=object())
    assert not accepted and 'cp_context' in why
    # The backward runs on CPU tensors.
    assert linac.fla.supports(run, q.clone().requires_grad_(), q, q, g,
                              beta) == (True, None)


def test_prepare_compiles_without_running(tmp_path, monkeypatch):
    monkeypatch.setenv('LINAC_CACHE_DIR', str(tmp_path))
    q = torch.randn(1, 4, 1, 16)
    g, beta = logsigmoid((1, 4, 1, 16)), torch.rand(1, 4, 1)
    layer = linac.fla.prepare(linac.fla.chunk_kda, q, q, q, g, beta,
                              target='cpu', use_qk_l2norm_in_kernel=True)
    assert layer.target == 'cpu' and layer.key_dim == 16
    assert os.path.dirname(layer.path) == str(tmp_path / 'packages')
    # The call itself finds the package prepare() put in the cache.
    o, _ = linac.fla.chunk_kda(q, q, q, g, beta, use_qk_l2norm_in_kernel=True)
    assert o.shape == (1, 4, 1, 16)
    assert len(os.listdir(tmp_path / 'packages')) == 1
