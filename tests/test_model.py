"""Transformer-XL and the vanilla Transformer: numbers against slow explicit computations."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.models.interface import Context
from txlab.models.attention import (
    LearnedRelativeAttention,
    LearnedRelativePositions,
    RelativeSinusoidAttention,
    RelativeSinusoidPositions,
    attention_mask,
    relative_distances,
    sinusoid,
)
from txlab.models.kernels import rel_shift
from txlab.models.transformer import Block, RecomputedMemory, build_transformer, update_memory

POS_ENCODINGS = ("ours", "shaw", "vaswani", "alrfou")
KERNELS = ("unfused", "sdpa")
"""Every attention kernel (txlab.models.kernels.ATTENTION_KERNELS): the loop references hold on each."""


def tiny_cfg(**kw) -> ModelConfig:
    base = dict(n_token=37, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, tgt_len=4, mem_len=4, dropout=0.0)
    return ModelConfig(**{**base, **kw})


def tiny_model(**kw):
    torch.manual_seed(0)
    return build_transformer(tiny_cfg(**kw)).eval()


def attention_sublayer(attn, window, n_query, mask, positions):
    """The attention sub-layer alone (no feed-forward) of the last ``n_query`` rows of ``window``, the rest its memory."""
    n_mem = window.size(1) - n_query
    return Block(attn, nn.Identity())(window[:, n_mem:], RecomputedMemory(window[:, :n_mem]), mask, positions)


# --- relative shift and the four-term score -----------------------------------------------------


def test_rel_shift_reindexes_distances_to_keys():
    n_query, n_mem = 3, 4
    n_keys = n_query + n_mem
    distances = relative_distances(n_keys, clamp_len=0)
    assert distances.tolist() == list(range(n_keys - 1, -2, -1))
    # Column c of row i holds 1000*i + distance(c); after the shift, key j must hold M+i-j.
    by_distance = (1000 * torch.arange(n_query)[:, None] + distances[None, :]).double()  # [T, K+1]
    by_distance = by_distance.expand(2, 3, n_query, n_keys + 1).contiguous()  # [B, H, T, K+1]
    shifted = rel_shift(by_distance)
    assert shifted.shape == (2, 3, n_query, n_keys)
    for i in range(n_query):
        for j in range(n_mem + i + 1):  # visible keys only; the rest is masked garbage
            assert shifted[1, 2, i, j].item() == 1000 * i + (n_mem + i - j)


def _explicit_attention(attn, window, n_query, mask, score_fn):
    """Loop over (b, h, i, j): softmax of score_fn(b, h, i, j, q, k) / sqrt(Dh), then o_net, residual, LN."""
    batch, n_keys, _ = window.shape
    H, Dh = attn.n_head, attn.d_head
    w_q, w_k, w_v = attn.qkv_net.weight.split(H * Dh)
    q = (window[:, -n_query:] @ w_q.T).view(batch, n_query, H, Dh)
    k = (window @ w_k.T).view(batch, n_keys, H, Dh)
    v = (window @ w_v.T).view(batch, n_keys, H, Dh)
    out = torch.zeros(batch, n_query, H, Dh, dtype=window.dtype)
    for b in range(batch):
        for h in range(H):
            for i in range(n_query):
                scores = torch.full((n_keys,), float("-inf"), dtype=window.dtype)
                for j in range(n_keys):
                    if mask[i, j] == 0:
                        scores[j] = score_fn(b, h, i, j, q, k) / math.sqrt(Dh)
                out[b, i, h] = scores.softmax(0) @ v[b, :, h]
    residual = window[:, -n_query:] + attn.o_net(out.reshape(batch, n_query, H * Dh))
    return attn.layer_norm(residual)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("gradients", [True, False])
def test_four_term_relative_attention_matches_explicit_loop(kernel, gradients):
    torch.manual_seed(1)
    cfg = tiny_cfg(d_model=6, n_head=2, d_head=3, attn_kernel=kernel)
    attn = RelativeSinusoidAttention(cfg).double().eval()
    n_query, n_mem, clamp_len = 3, 4, 2
    n_keys = n_query + n_mem
    window = torch.randn(2, n_keys, 6, dtype=torch.float64)
    u, v = torch.randn(2, 3, dtype=torch.float64), torch.randn(2, 3, dtype=torch.float64)
    r = sinusoid(relative_distances(n_keys, clamp_len).double(), 6)
    mask = attention_mask(n_query, n_mem, 0, torch.float64)
    with torch.set_grad_enabled(gradients):  # the training path, and inference's (position scores one batch row at a time)
        positions = RelativeSinusoidPositions(content_bias_u=u, position_bias_v=v, position_keys=attn.position_keys(r))
        got = attention_sublayer(attn, window, n_query, mask, positions)

    w_r = attn.r_net.weight.view(2, 3, 6)  # [H, Dh, d]

    def score(b, h, i, j, q, k):
        distance = min(n_mem + i - j, clamp_len)
        r_ij = w_r[h] @ sinusoid(torch.tensor([float(distance)], dtype=torch.float64), 6)[0]  # W_{k,R} R_{i-j}
        term_a = q[b, i, h] @ k[b, j, h]
        term_b = q[b, i, h] @ r_ij
        term_c = u[h] @ k[b, j, h]
        term_d = v[h] @ r_ij
        return term_a + term_b + term_c + term_d

    want = _explicit_attention(attn, window, n_query, mask, score)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("gradients", [True, False])
def test_shaw_attention_matches_explicit_loop_and_shares_the_last_row(kernel, gradients):
    torch.manual_seed(2)
    cfg = tiny_cfg(d_model=6, n_head=2, d_head=3, attn_kernel=kernel)
    n_dist = 3  # distances 3.. share row 2
    attn = LearnedRelativeAttention(cfg, n_dist).double().eval()
    n_query, n_mem = 3, 3
    n_keys = n_query + n_mem
    window = torch.randn(2, n_keys, 6, dtype=torch.float64)
    mask = attention_mask(n_query, n_mem, 0, torch.float64)
    with torch.set_grad_enabled(gradients):
        positions = LearnedRelativePositions(attn.position_keys(relative_distances(n_keys, 0)))
        got = attention_sublayer(attn, window, n_query, mask, positions)

    def score(b, h, i, j, q, k):
        row = min(n_mem + i - j, n_dist - 1)
        return q[b, i, h] @ k[b, j, h] + q[b, i, h] @ attn.rel_emb[row, h]

    want = _explicit_attention(attn, window, n_query, mask, score)
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


# --- masks and clamping -----------------------------------------------------------------------


def test_same_length_every_query_attends_the_same_number_of_keys():
    n_query, mem_len = 5, 6
    full = attention_mask(n_query, mem_len, mem_len, torch.float32)  # memory full
    counts = torch.isfinite(full).sum(1)
    assert counts.tolist() == [mem_len] * n_query
    # Each query attends its own token and the mem_len - 1 before it.
    for i in range(n_query):
        visible = torch.isfinite(full[i]).nonzero().flatten().tolist()
        assert visible == list(range(mem_len + i - mem_len + 1, mem_len + i + 1))
    # With less history, the count is capped by what exists; without same_length it grows.
    short = torch.isfinite(attention_mask(n_query, 2, mem_len, torch.float32)).sum(1)
    assert short.tolist() == [3, 4, 5, 6, 6]
    causal = torch.isfinite(attention_mask(n_query, mem_len, 0, torch.float32)).sum(1)
    assert causal.tolist() == [7, 8, 9, 10, 11]


def test_same_length_through_the_model_ignores_keys_outside_the_window():
    model = tiny_model()
    model.set_context(Context(mem_len=4, same_length=True))
    tokens = torch.randint(0, 37, (2, 8))
    base = model(tokens, model.init_state(2), tokens).nll
    perturbed = tokens.clone()
    perturbed[:, 0] = (perturbed[:, 0] + 1) % 37  # only queries 0..3 have token 0 in their window of 4
    # Token 0 affects layer 1 inputs at positions 0..3, which queries up to 6 see: positions 7 on are untouched.
    nll = model(perturbed, model.init_state(2), perturbed).nll
    torch.testing.assert_close(nll[:, 7:], base[:, 7:])
    assert not torch.allclose(nll[:, 1:4], base[:, 1:4])


def test_clamp_len_distances_share_one_embedding():
    distances = relative_distances(10, clamp_len=3)
    assert distances.max().item() == 3
    table = sinusoid(distances.float(), 8)
    beyond = table[distances == 3]  # every distance >= 3
    assert len(beyond) == 7 and torch.equal(beyond, beyond[:1].expand_as(beyond))
    # Through the model: with clamp 1, swapping two far memory rows changes nothing but content order.
    model = tiny_model()
    model.set_context(Context(mem_len=8, clamp_len=1))
    tokens = torch.randint(0, 37, (1, 4))
    state = [torch.randn(1, 6, 16) for _ in range(2)]
    swapped = [s[:, [1, 0, 2, 3, 4, 5]] for s in state]  # distances >= 5: both clamped to 1
    torch.testing.assert_close(model(tokens, state, tokens).nll, model(tokens, swapped, tokens).nll)


# --- recurrence -------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("pos_enc", ["ours", "shaw"])
def test_segments_with_enough_memory_equal_one_pass(pos_enc, kernel):
    model = tiny_model(pos_enc=pos_enc, max_len=16, attn_kernel=kernel)
    tokens = torch.randint(0, 37, (3, 13))
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    with torch.no_grad():
        one_pass = model(inputs, model.init_state(3), targets).nll
        model.set_context(Context(mem_len=12))  # >= every prefix: the memory spans several segments
        state, chunks = model.init_state(3), []
        for start in range(0, 12, 4):
            out = model(inputs[:, start : start + 4], state, targets[:, start : start + 4])
            chunks.append(out.nll)
            state = out.state
    torch.testing.assert_close(torch.cat(chunks, 1), one_pass, rtol=1e-5, atol=1e-5)


def test_memory_holds_the_inputs_of_every_layer_over_several_segments():
    model = tiny_model()
    model.set_context(Context(mem_len=6))
    tokens = torch.randint(0, 37, (2, 12))
    state = model.init_state(2)
    assert [s.shape for s in state] == [(2, 0, 16)] * 2
    with torch.no_grad():
        for start in range(0, 12, 4):
            state = model(tokens[:, start : start + 4], state).state
        assert [s.shape for s in state] == [(2, 6, 16)] * 2
        # The first layer's memory is the embedding output of the last 6 tokens (spanning 2 segments).
        torch.testing.assert_close(state[0], model.word_emb(tokens[:, -6:]))


def test_memory_update_attends_the_concatenation_and_keeps_its_last_mem_len_rows_detached():
    memory = torch.randn(2, 3, 4)
    inputs = torch.randn(2, 5, 4, requires_grad=True)
    window, next_memory = update_memory(memory, inputs, mem_len=6)
    assert torch.equal(window, torch.cat([memory, inputs], dim=1))
    assert window.requires_grad and not next_memory.requires_grad
    assert torch.equal(next_memory, window[:, 2:].detach())  # the last 6 of 8 rows
    _, everything = update_memory(memory, inputs, mem_len=20)
    assert torch.equal(everything, window.detach())
    _, nothing = update_memory(memory, inputs, mem_len=0)
    assert nothing.shape == (2, 0, 4)


def test_gradients_never_flow_into_memory():
    model = tiny_model().train()
    tokens = torch.randint(0, 37, (2, 9))
    first = model(tokens[:, :4], model.init_state(2), tokens[:, 1:5])
    assert all(not s.requires_grad and s.grad_fn is None for s in first.state)
    second = model(tokens[:, 4:8], first.state, tokens[:, 5:9])
    second.nll.sum().backward()
    # Had the second backward entered the first segment's graph, it would have freed it.
    first.nll.sum().backward()


# --- causality and state hygiene ---------------------------------------------------------------


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("family,pos_enc", [("xl", p) for p in POS_ENCODINGS] + [("vanilla", "alrfou"), ("vanilla", "vaswani")])
def test_loss_at_k_never_depends_on_later_tokens(family, pos_enc, kernel):
    model = tiny_model(family=family, pos_enc=pos_enc, tgt_len=8, max_len=16, attn_kernel=kernel)
    tokens = torch.randint(0, 37, (2, 17))
    with torch.no_grad():
        state = model(tokens[:, :8], model.init_state(2)).state  # memory for xl, nothing for vanilla
        inputs, targets = tokens[:, 8:16], tokens[:, 9:17]
        base = model(inputs, state, targets).nll
        for k in range(7):
            later = inputs.clone()
            later[:, k + 1 :] = (later[:, k + 1 :] + 5) % 37
            nll = model(later, state, targets).nll
            torch.testing.assert_close(nll[:, : k + 1], base[:, : k + 1])
            assert not torch.allclose(nll[:, k + 1 :], base[:, k + 1 :])


@pytest.mark.parametrize("pos_enc", ["vaswani", "alrfou"])
def test_absolute_encodings_leave_the_state_unchanged(pos_enc):
    model = tiny_model(pos_enc=pos_enc)
    tokens = torch.randint(0, 37, (2, 8))
    with torch.no_grad():
        state = model(tokens[:, :4], model.init_state(2)).state
        kept = [s.clone() for s in state]
        model(tokens[:, 4:], state)
        model(tokens[:, 4:], state)
    for s, k in zip(state, kept):
        assert torch.equal(s, k)


# --- vanilla Transformer and sliding windows ---------------------------------------------------


def test_vanilla_has_a_fixed_window_and_no_memory():
    model = tiny_model(family="vanilla", pos_enc="alrfou", tgt_len=6)
    assert model.max_context == 6
    model.set_context(Context(mem_len=100, same_length=True))
    tokens = torch.randint(0, 37, (2, 7))
    out = model(tokens[:, :6], model.init_state(2))
    assert [s.size(1) for s in out.state] == [0, 0]
    with pytest.raises(ValueError, match="max_len=6"):
        model(tokens, model.init_state(2))
    with pytest.raises(TxlabError, match="absolute positions"):
        build_transformer(tiny_cfg(family="vanilla", pos_enc="ours"))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("family,pos_enc", [("vanilla", "alrfou"), ("xl", "ours"), ("xl", "shaw")])
def test_window_last_nll_equals_the_last_position_of_a_full_pass(family, pos_enc, kernel):
    model = tiny_model(family=family, pos_enc=pos_enc, tgt_len=6, max_len=8, attn_kernel=kernel)
    windows = torch.randint(0, 37, (5, 6))
    targets = torch.randint(0, 37, (5,))
    with torch.no_grad():
        full = model(windows, model.init_state(5), torch.cat([windows[:, 1:], targets[:, None]], 1)).nll
        torch.testing.assert_close(model.window_last_nll(windows, targets), full[:, -1])
        torch.testing.assert_close(model.window_tail_nll(windows, torch.cat([windows[:, 4:], targets[:, None]], 1)), full[:, -3:])


# --- attention kernels and torch.compile ------------------------------------------------------


def kernel_stream(model, tokens, chunks, gradients):
    """Losses of reading ``tokens`` chunk by chunk carrying the state, the final state, and (with gradients) the
    gradient of their sum for every parameter."""
    state, losses, start = model.init_state(tokens.size(0)), [], 0
    with torch.set_grad_enabled(gradients):
        for n in chunks:
            out = model(tokens[:, start : start + n], state, tokens[:, start + 1 : start + n + 1])
            losses.append(out.nll)
            state, start = out.state, start + n
        nll = torch.cat(losses, 1)
        grads = torch.autograd.grad(nll.sum(), list(model.parameters()), allow_unused=True) if gradients else []
    return nll.detach(), state, [g for g in grads if g is not None]


@pytest.mark.parametrize("family,pos_enc", [("xl", p) for p in POS_ENCODINGS] + [("vanilla", "alrfou"), ("vanilla", "vaswani")])
@pytest.mark.parametrize("gradients", [True, False])
def test_every_kernel_computes_the_same_attention(family, pos_enc, gradients):
    """fp32, random weights, memory over several chunks, same_length and clamp_len, dropout off: each kernel
    agrees with the unfused one to 1e-6 in losses, the memory of every layer and (with gradients) every gradient."""
    model = tiny_model(family=family, pos_enc=pos_enc, max_len=12, mem_len=6)
    with torch.no_grad():
        for p in model.parameters():  # weights far from the tiny initial ones, so attention is far from uniform
            p.normal_(0, 0.3)
    model.train(gradients)  # training mode with gradients (dropout is 0), evaluation mode (the cached state) without
    model.set_context(Context(mem_len=6, same_length=True, clamp_len=3))
    tokens = torch.randint(0, 37, (3, 14))
    chunks = [4, 4, 1, 3] if family == "xl" else [4]
    results = {}
    for kernel in ("auto", *KERNELS):
        model.set_attn_kernel(kernel)
        results[kernel] = kernel_stream(model, tokens, chunks, gradients)
    nll, state, grads = results["unfused"]
    assert nll.std() > 0.1  # far from uniform: a wrong score term would show
    for kernel, (other_nll, other_state, other_grads) in results.items():
        torch.testing.assert_close(other_nll, nll, rtol=0, atol=1e-6, msg=f"{kernel}: losses")
        for m_other, m in zip(other_state, state):
            torch.testing.assert_close(m_other, m, rtol=0, atol=1e-6, msg=f"{kernel}: memory")
        assert len(other_grads) == len(grads)
        for g_other, g in zip(other_grads, grads):
            torch.testing.assert_close(g_other, g, rtol=1e-5, atol=1e-6, msg=f"{kernel}: gradients")


def test_choose_kernel_auto_and_attention_dropout():
    from txlab.models.kernels import AUTO_KERNEL, choose_kernel

    assert AUTO_KERNEL == {(False, False): "sdpa", (False, True): "sdpa", (True, False): "unfused", (True, True): "unfused"}
    assert choose_kernel("auto", relative=False, gradients=True, dropatt=0.0) == "sdpa"
    assert choose_kernel("auto", relative=True, gradients=False, dropatt=0.0) == "unfused"
    assert choose_kernel("sdpa", relative=True, gradients=True, dropatt=0.0) == "sdpa"
    assert choose_kernel("sdpa", relative=False, gradients=True, dropatt=0.1) == "unfused"  # only the unfused kernel drops attention
    with pytest.raises(TxlabError, match="unknown attention kernel 'flex'; valid: auto, unfused, sdpa"):
        tiny_model().set_attn_kernel("flex")


def test_attention_dropout_trains_on_every_kernel_setting():
    model = tiny_model(dropatt=0.5, attn_kernel="sdpa").train()
    tokens = torch.randint(0, 37, (2, 9))
    torch.manual_seed(3)
    sdpa = model(tokens[:, :8], model.init_state(2), tokens[:, 1:]).nll
    model.set_attn_kernel("unfused")
    torch.manual_seed(3)
    torch.testing.assert_close(model(tokens[:, :8], model.init_state(2), tokens[:, 1:]).nll, sdpa, rtol=0, atol=0)


def test_a_compiled_model_keeps_its_parameter_names():
    plain, compiled = tiny_model(), tiny_model(compile=True)
    assert list(compiled.state_dict()) == list(plain.state_dict())
    compiled.load_state_dict(plain.state_dict())  # checkpoints load either way


@pytest.mark.slow
@pytest.mark.parametrize("pos_enc", ["ours", "alrfou"])
def test_a_compiled_model_trains_and_evaluates_like_the_eager_one(pos_enc):
    """torch.compile of every layer: the same losses, gradients and cached evaluation (to 1e-5: inductor may reorder sums)."""
    eager, compiled = tiny_model(pos_enc=pos_enc, max_len=12, mem_len=6), tiny_model(pos_enc=pos_enc, max_len=12, mem_len=6, compile=True)
    tokens = torch.randint(0, 37, (3, 14))
    for gradients in (True, False):
        for model in (eager, compiled):
            model.train(gradients)
            model.set_context(Context(mem_len=6, same_length=not gradients, clamp_len=0))
        want, got = kernel_stream(eager, tokens, [4, 4, 4], gradients), kernel_stream(compiled, tokens, [4, 4, 4], gradients)
        torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-5)
        for g_got, g_want in zip(got[2], want[2]):
            torch.testing.assert_close(g_got, g_want, rtol=1e-4, atol=1e-5)


# --- softmax, sizes, FLOPs --------------------------------------------------------------------


def test_adaptive_softmax_losses_are_in_token_order_and_normalised():
    model = tiny_model(n_token=50, adaptive=True, cutoffs=[10, 30], div_val=2)
    tokens = torch.randint(0, 50, (3, 9))
    with torch.no_grad():
        out = model(tokens[:, :-1], model.init_state(3), tokens[:, 1:])
        log_prob = model.log_prob(out.hidden)  # [B, T, V]
    assert log_prob.shape == (3, 8, 50)
    torch.testing.assert_close(log_prob.exp().sum(-1), torch.ones(3, 8))
    direct = -log_prob.gather(-1, tokens[:, 1:, None]).squeeze(-1)
    torch.testing.assert_close(out.nll, direct)


@pytest.mark.parametrize(
    "fields,millions",
    [
        (dict(n_layer=16, d_model=410, n_head=10, d_head=41, d_inner=2100, n_token=267735,
              adaptive=True, cutoffs=[20000, 40000, 200000], div_val=1), 151.1),  # xl151m
        (dict(n_layer=12, d_model=512, n_head=8, d_head=64, d_inner=2048, n_token=204), 41.1),  # xl-enwik8-12l
        (dict(n_layer=24, d_model=1024, n_head=8, d_head=128, d_inner=3072, n_token=204), 277.2),  # xl-enwik8-24l
    ],
)
def test_paper_parameter_counts(fields, millions):
    with torch.device("meta"):
        model = build_transformer(ModelConfig(**fields, tie_weight=True))
    assert abs(model.num_parameters() / 1e6 - millions) / millions < 0.005


def test_flops_per_token_by_hand():
    # 1 layer, d 4, 2 heads of 2, d_inner 8, 10 tokens, plain softmax; 5 keys.
    model = build_transformer(ModelConfig(n_token=10, n_layer=1, d_model=4, n_head=2, d_head=2, d_inner=8))
    projections = 2 * 4 * 4 * 4  # q, k, v, o: 4 matmuls of d x (H*Dh)
    scores = 2 * 4 * 5 * 2  # (a)+(c) and (b)+(d) over 5 keys
    weighted_sum = 2 * 4 * 5
    feed_forward = 2 * 2 * 4 * 8
    softmax = 2 * 4 * 10
    assert model.counts().flops_per_token(5) == projections + scores + weighted_sum + feed_forward + softmax == 456
    absolute = build_transformer(ModelConfig(n_token=10, n_layer=1, d_model=4, n_head=2, d_head=2, d_inner=8, pos_enc="vaswani"))
    assert absolute.counts().flops_per_token(5) == 456 - 2 * 4 * 5
    # A window of 3: keys/values for all 3 rows, the last layer's query work only for the last one.
    kv, per_query = 2 * 4 * 2 * 4, 2 * 4 * 4 * 2 + 2 * 4 * 3 * 2 + 2 * 4 * 3 + 2 * 2 * 4 * 8
    assert model.counts().window_flops(3) == 3 * kv + 1 * per_query + softmax
