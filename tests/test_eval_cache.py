"""The cached evaluation state of Transformer-XL (txlab.models.eval_cache.CachedMemory) against the training path.

In evaluation (eval mode, no autograd) Transformer-XL keeps, per layer, the keys and values of its
memory rows and reuses its position keys, so a chunk projects only its own rows. Everything here
compares that path with the training path (``model.set_eval_cache(False)``: every chunk re-projects the
whole memory) over many chunks. In float64 the two agree to ~1e-15: the only differences are the
rounding of a matrix product over T rows instead of M + T (and, with absolute positions,
W x + W p instead of W (x + p)). In float32 they agree to a few units in the last place (~2e-7 on
losses of ~3.6 nats).
"""

from __future__ import annotations

import itertools

import pytest
import torch

from txlab.config import ModelConfig
from txlab.models.eval_cache import CachedMemory
from txlab.models.interface import Context
from txlab.models.transformer import build_transformer, capture_attention

POS_ENCODINGS = ("ours", "shaw", "vaswani", "alrfou")
KERNELS = ("unfused", "sdpa")
"""Every attention kernel: the cached state equals the training path on each."""
VOCAB = 37


def model_for(dtype=torch.float64, **kw):
    base = dict(n_token=VOCAB, n_layer=3, d_model=16, n_head=2, d_head=8, d_inner=24, tgt_len=4, mem_len=9,
                dropout=0.0, max_len=12)
    torch.manual_seed(0)
    model = build_transformer(ModelConfig(**{**base, **kw})).to(dtype).eval()
    with torch.no_grad():  # layer norms and biases start constant: make every parameter matter
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    return model


def stream(model, tokens, chunk_lens, cached: bool, state=None, mode=torch.inference_mode):
    """NLL [B, sum(chunk_lens)] of tokens[:, 1:] read chunk by chunk, the states after every chunk."""
    model.set_eval_cache(cached)
    try:
        state = model.init_state(tokens.size(0)) if state is None else state
        losses, states, start = [], [], 0
        with mode():
            for n in chunk_lens:
                out = model(tokens[:, start : start + n], state, tokens[:, start + 1 : start + n + 1])
                losses.append(out.nll)
                states.append(out.state)
                state, start = out.state, start + n
        return torch.cat(losses, 1), states
    finally:
        model.set_eval_cache(True)


def close(dtype):
    return dict(rtol=0, atol=1e-12) if dtype == torch.float64 else dict(rtol=1e-5, atol=1e-5)


CHUNKS = [4] * 8 + [1, 1, 1, 7, 3, 4, 2, 5]  # 48 tokens: segment length 4, then one token at a time, uneven chunks


SETTINGS = [(p, pre, same, clamp) for p, pre, (same, clamp) in itertools.product(POS_ENCODINGS, (False, True), ((False, 0), (True, 0), (True, 5)))]


def _in_default_run(pos_enc: str, pre_lnorm: bool, same_length: bool, clamp_len: int, kernel: str) -> bool:
    """A pairwise covering of the float64 grid: 12 of its 48 cases hold every pair of values of any two of kernel,
    encoding, pre_lnorm and the (same_length, clamp_len) setting (p + s and p // 2 + s each take both parities as p
    or s varies, and jointly all four); the slow run reads the other 36."""
    p, s = POS_ENCODINGS.index(pos_enc), [(False, 0), (True, 0), (True, 5)].index((same_length, clamp_len))
    return kernel == KERNELS[(p + s) % 2] and pre_lnorm == bool((p // 2 + s) % 2)


# Every setting in float64, whose 1e-12 tolerance shows any difference in what is computed (a pairwise covering of them
# in the default run); in float32 (another attention kernel may run) each encoding at the usual setting with each
# kernel in the default run, the other float32 repeats in the slow one.
@pytest.mark.parametrize(
    "pos_enc,pre_lnorm,same_length,clamp_len,dtype,kernel",
    [*[pytest.param(*setting, torch.float64, kernel, marks=() if _in_default_run(*setting, kernel) else pytest.mark.slow)
       for setting in SETTINGS for kernel in KERNELS],
     *[pytest.param(*setting, torch.float32, kernel, marks=() if setting[1:] == (False, True, 0) else pytest.mark.slow)
       for setting in SETTINGS for kernel in KERNELS]],
)
def test_cached_evaluation_equals_the_training_path(pos_enc, pre_lnorm, same_length, clamp_len, dtype, kernel):
    model = model_for(dtype, pos_enc=pos_enc, pre_lnorm=pre_lnorm, attn_kernel=kernel)
    model.set_context(Context(mem_len=9, same_length=same_length, clamp_len=clamp_len))  # spans 2-3 segments of 4
    tokens = torch.randint(0, VOCAB, (3, sum(CHUNKS) + 1))
    plain, plain_states = stream(model, tokens, CHUNKS, cached=False)
    cached, cached_states = stream(model, tokens, CHUNKS, cached=True)
    torch.testing.assert_close(cached, plain, **close(dtype))
    for before, after in zip(plain_states, cached_states):
        assert isinstance(after, CachedMemory) and not isinstance(before, CachedMemory)
        # The memory is trimmed alike: the same number of rows (up to 9, across several chunks) in every layer.
        assert [m.shape for m in after] == [m.shape for m in before]
        for m_after, m_before in zip(after, before):
            torch.testing.assert_close(m_after, m_before, **close(dtype))


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("pos_enc", ["alrfou", "vaswani"])
def test_the_vanilla_transformer_is_unchanged(pos_enc, kernel):
    model = model_for(family="vanilla", pos_enc=pos_enc, attn_kernel=kernel)
    model.set_context(Context(mem_len=9, same_length=True))  # ignored: no memory
    tokens = torch.randint(0, VOCAB, (2, 13))
    plain, _ = stream(model, tokens, [12], cached=False)
    cached, states = stream(model, tokens, [12], cached=True)
    assert torch.equal(cached, plain)
    assert not isinstance(states[-1], CachedMemory)
    windows = tokens[:, :12]
    with torch.inference_mode():  # the top layer's one query need not round like twelve (the unfused kernel's products)
        torch.testing.assert_close(model.window_last_nll(windows, tokens[:, 12]), plain[:, -1], rtol=0, atol=1e-12)


def test_without_memory_nothing_is_cached():
    model = model_for(mem_len=0)
    model.set_context(Context(mem_len=0))
    tokens = torch.randint(0, VOCAB, (2, 9))
    plain, _ = stream(model, tokens, [4, 4], cached=False)
    cached, states = stream(model, tokens, [4, 4], cached=True)
    assert torch.equal(cached, plain)
    assert [m.size(1) for m in states[-1]] == [0, 0, 0]


def test_the_cache_is_used_only_without_gradients_and_in_eval_mode():
    model = model_for()
    tokens = torch.randint(0, VOCAB, (2, 5))
    with torch.no_grad():
        assert isinstance(model(tokens[:, :4], model.init_state(2)).state, CachedMemory)
    assert not isinstance(model(tokens[:, :4], model.init_state(2)).state, CachedMemory)  # gradients on
    model.train()
    with torch.no_grad():
        assert not isinstance(model(tokens[:, :4], model.init_state(2)).state, CachedMemory)


def test_a_cached_state_is_a_memory_for_training_and_for_the_training_path():
    model = model_for(pos_enc="ours")
    tokens = torch.randint(0, VOCAB, (2, 17))
    _, states = stream(model, tokens, [4, 4], cached=True)
    memory = [m.clone() for m in states[-1]]
    # In training (gradients on), a CachedMemory behaves exactly as the plain list of its tensors.
    a = model(tokens[:, 8:12], states[-1], tokens[:, 9:13]).nll
    b = model(tokens[:, 8:12], memory, tokens[:, 9:13]).nll
    assert torch.equal(a, b)
    a.sum().backward()
    # A plain memory (from training) continues on the cached path as on the training path.
    plain, _ = stream(model, tokens[:, 8:], [4, 4], cached=False, state=memory)
    cached, _ = stream(model, tokens[:, 8:], [4, 4], cached=True, state=memory)
    torch.testing.assert_close(cached, plain, **close(torch.float64))


def _written_in_place(model, mode=torch.no_grad):
    with mode():
        for block in model.blocks:
            block.attn.qkv_net.weight.mul_(1.5)
        model.blocks[0].attn.r_net.weight.add_(0.1)


def _copied_in_place(model):
    with torch.inference_mode():
        for block in model.blocks:
            block.attn.qkv_net.weight.copy_(1.5 * block.attn.qkv_net.weight)


def _written_through_data(model):
    for block in model.blocks:
        block.attn.qkv_net.weight.data.mul_(1.5)  # .data hides the write from torch's version counter, as from autograd


def _optimizer_step(model, tokens, **adam):
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05, **adam) if adam else torch.optim.SGD(model.parameters(), lr=0.5)
    model(tokens[:, :4], model.init_state(2), tokens[:, 1:5]).nll.sum().backward()  # eval mode, gradients on
    optimizer.step()


WEIGHT_CHANGES = {
    "an optimizer step": lambda model, tokens: _optimizer_step(model, tokens),
    # fused Adam writes the weights without bumping their version counters: still seen, by the optimizer's step hook
    "a fused Adam step": lambda model, tokens: _optimizer_step(model, tokens, fused=True),
    "load_state_dict": lambda model, tokens: model.load_state_dict({k: 1.5 * v for k, v in model.state_dict().items()}),
    "a write during training": lambda model, tokens: (model.train(), _written_in_place(model), model.eval()),
    # in-place writes, unannounced: each bumps the parameter's version counter
    "p.add_() and p.mul_() under no_grad": lambda model, tokens: _written_in_place(model),
    "p.copy_() in inference mode": lambda model, tokens: _copied_in_place(model),
    "a write through .data, announced": lambda model, tokens: (_written_through_data(model), model.weights_changed()),
}


@pytest.mark.parametrize("change", WEIGHT_CHANGES)
def test_changed_weights_are_never_read_from_the_cache(change):
    model = model_for()
    tokens = torch.randint(0, VOCAB, (2, 21))
    _, states = stream(model, tokens, [4, 4, 4], cached=True)
    memory = [m.clone() for m in states[-1]]
    before, _ = stream(model, tokens[:, 12:], [4, 4], cached=False, state=memory)
    WEIGHT_CHANGES[change](model, tokens)
    plain, _ = stream(model, tokens[:, 12:], [4, 4], cached=False, state=memory)
    cached, _ = stream(model, tokens[:, 12:], [4, 4], cached=True, state=states[-1])
    assert (plain - before).abs().max() > 1e-3  # the change moves the losses: stale keys would show
    torch.testing.assert_close(cached, plain, **close(torch.float64))


def test_the_eval_cache_is_a_setting_of_the_model():
    model = model_for()
    tokens = torch.randint(0, VOCAB, (2, 5))
    assert model.eval_cache
    with torch.inference_mode():
        model.set_eval_cache(False)
        assert not model.eval_cache and not isinstance(model(tokens[:, :4], model.init_state(2)).state, CachedMemory)
        model.set_eval_cache(True)
        assert isinstance(model(tokens[:, :4], model.init_state(2)).state, CachedMemory)
    with pytest.raises(AttributeError):
        model.eval_cache = False  # not an attribute to flip: set_eval_cache


@pytest.mark.parametrize("mode", [torch.inference_mode, torch.no_grad])
def test_a_state_read_twice_gives_the_same_continuation_both_times(mode):
    """States of one stream share storage: a continuation must never overwrite rows another state sees."""
    model = model_for()
    tokens = torch.randint(0, VOCAB, (2, 30))
    other = torch.randint(0, VOCAB, (2, 30))
    _, states = stream(model, tokens, [4, 4], cached=True, mode=mode)
    kept = [m.clone() for m in states[-1]]
    first, _ = stream(model, tokens[:, 8:], [4, 1, 4], cached=True, state=states[-1], mode=mode)
    stream(model, other[:, 8:], [4, 4, 4, 4], cached=True, state=states[-1], mode=mode)  # a different continuation
    again, _ = stream(model, tokens[:, 8:], [4, 1, 4], cached=True, state=states[-1], mode=mode)
    assert torch.equal(first, again)
    assert all(torch.equal(m, k) for m, k in zip(states[-1], kept))


def test_states_made_in_inference_mode_continue_under_no_grad():
    model = model_for()
    tokens = torch.randint(0, VOCAB, (2, 30))
    plain, _ = stream(model, tokens, [4] * 7, cached=False)
    _, states = stream(model, tokens, [4] * 3, cached=True, mode=torch.inference_mode)
    rest, _ = stream(model, tokens[:, 12:], [4] * 4, cached=True, state=states[-1], mode=torch.no_grad)
    torch.testing.assert_close(rest, plain[:, 12:], **close(torch.float64))


def test_a_long_stream_one_token_at_a_time():
    """Generation's pattern: one token per chunk, the memory store moved every ~mem_len tokens."""
    model = model_for()
    model.set_context(Context(mem_len=9, same_length=True, clamp_len=6))
    tokens = torch.randint(0, VOCAB, (1, 61))
    plain, _ = stream(model, tokens, [1] * 60, cached=False)
    cached, _ = stream(model, tokens, [1] * 60, cached=True)
    torch.testing.assert_close(cached, plain, **close(torch.float64))


def test_changing_the_memory_length_mid_stream_trims_alike():
    model = model_for()
    tokens = torch.randint(0, VOCAB, (2, 41))
    runs = []
    for cached in (False, True):
        model.set_eval_cache(cached)
        state, losses, rows = model.init_state(2), [], 0
        with torch.inference_mode():
            for i, mem_len in enumerate([9, 9, 9, 3, 3, 12, 12, 12, 12, 5]):
                model.set_context(Context(mem_len=mem_len, same_length=i % 2 == 0))
                out = model(tokens[:, 4 * i : 4 * i + 4], state, tokens[:, 4 * i + 1 : 4 * i + 5])
                losses.append(out.nll)
                state = out.state
                rows = min(mem_len, rows + 4)  # the last mem_len rows of [memory ; chunk]
                assert [m.size(1) for m in state] == [rows] * 3
        runs.append(torch.cat(losses, 1))
    model.set_eval_cache(True)
    torch.testing.assert_close(runs[1], runs[0], **close(torch.float64))


@pytest.mark.parametrize("pos_enc", ["ours", "shaw"])
def test_attention_records_are_the_same_on_both_paths(pos_enc):
    model = model_for(pos_enc=pos_enc)
    model.set_context(Context(mem_len=9, same_length=True))
    tokens = torch.randint(0, VOCAB, (2, 17))
    recorded = []
    for cached in (False, True):
        with capture_attention(model) as records:
            stream(model, tokens, [4, 4, 4, 4], cached=cached)
        recorded.append(records)
    for plain_layer, cached_layer in zip(*recorded):
        for plain, cached in zip(plain_layer, cached_layer):
            torch.testing.assert_close(cached.probs, plain.probs, **close(torch.float64))
            assert set(cached.terms) == set(plain.terms)
            for term in plain.terms:
                torch.testing.assert_close(cached.terms[term], plain.terms[term], **close(torch.float64))


def test_a_model_built_in_inference_mode_evaluates_alike():
    """Its parameters keep no version counter, so an in-place write cannot be seen: nothing projected is reused."""
    with torch.inference_mode():
        model = model_for()
        tokens = torch.randint(0, VOCAB, (2, 21))
    plain, _ = stream(model, tokens, [4] * 4, cached=False)
    cached, states = stream(model, tokens, [4] * 4, cached=True)
    torch.testing.assert_close(cached, plain, **close(torch.float64))
    _written_in_place(model, torch.inference_mode)
    plain, _ = stream(model, tokens[:, 16:], [4], cached=False, state=[m.clone() for m in states[-1]])
    cached, _ = stream(model, tokens[:, 16:], [4], cached=True, state=states[-1])
    torch.testing.assert_close(cached, plain, **close(torch.float64))
