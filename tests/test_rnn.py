import numpy as np
import pytest
import torch

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.models.rnn import ForgetMult, build_rnn

FAMILIES = ("lstm", "qrnn")


def tiny_cfg(family: str, **overrides) -> ModelConfig:
    """A few-hundred-parameter model with a three-cluster adaptive softmax and all dropouts on."""
    fields = dict(
        family=family, n_token=40, n_layer=3, d_model=8, d_inner=12, adaptive=True, cutoffs=[10, 25], div_val=2,
        dropout=0.3, dropout_hidden=0.3, qrnn_window=2,
    )
    return ModelConfig(**{**fields, **overrides})


def tiny_model(family: str, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return build_rnn(tiny_cfg(family, **overrides)).double().eval()


def random_tokens(batch: int, length: int, n_token: int = 40, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, n_token, (batch, length), generator=torch.Generator().manual_seed(seed))


def state_tensors(state) -> list[torch.Tensor]:
    return [t for layer in state for t in layer]


def test_forget_mult_matches_autograd_of_the_plain_loop():
    torch.manual_seed(0)
    a = torch.rand(6, 3, 4, dtype=torch.float64, requires_grad=True)
    b = torch.randn(6, 3, 4, dtype=torch.float64, requires_grad=True)
    c0 = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(ForgetMult.apply, (a, b, c0))
    c, expected = c0, []
    for t in range(6):
        c = a[t] * c + b[t]
        expected.append(c)
    torch.testing.assert_close(ForgetMult.apply(a, b, c0), torch.stack(expected), rtol=0, atol=1e-14)


@pytest.mark.parametrize("window", [1, 2, 3])
def test_qrnn_equals_an_explicit_fp64_loop(window):
    model = tiny_model("qrnn", qrnn_window=window)
    tokens = random_tokens(2, 7)
    x = model.embedding(tokens)  # [B, T, E]; unscaled, no dropout in eval mode
    for layer in model.stack.layers:  # written out from the equations, one timestep at a time
        weight, bias, H = layer.linear.weight, layer.linear.bias, layer.d_out
        c = torch.zeros(2, H, dtype=torch.float64)
        past = [torch.zeros(2, layer.d_in, dtype=torch.float64)] * (layer.window - 1)
        hs = []
        for t in range(tokens.shape[1]):
            past = past + [x[:, t]]  # the window, oldest first
            y = torch.cat(past, dim=-1) @ weight.T + bias
            past = past[1:]
            z, f, o = torch.tanh(y[:, :H]), torch.sigmoid(y[:, H : 2 * H]), torch.sigmoid(y[:, 2 * H :])
            c = f * z + (1 - f) * c
            hs.append(o * c)
        x = torch.stack(hs, dim=1)
    out = model(tokens, model.init_state(2))
    torch.testing.assert_close(out.hidden, x, rtol=0, atol=1e-12)
    assert model.stack.layers[0].window == window and all(layer.window == 1 for layer in model.stack.layers[1:])


@pytest.mark.parametrize("family,window", [("lstm", 2), ("qrnn", 2), ("qrnn", 3)])
def test_one_call_equals_chunks_with_the_state_carried(family, window):
    model = tiny_model(family, qrnn_window=window)
    tokens, targets = random_tokens(3, 12), random_tokens(3, 12, seed=2)
    whole = model(tokens, model.init_state(3), targets)
    state, nll = model.init_state(3), []
    for lo, hi in [(0, 5), (5, 6), (6, 12)]:  # a one-token chunk is shorter than a window of 3
        out = model(tokens[:, lo:hi], state, targets[:, lo:hi])
        state = out.state
        nll.append(out.nll)
    torch.testing.assert_close(torch.cat(nll, dim=1), whole.nll, rtol=0, atol=1e-10)
    for a, b in zip(state_tensors(state), state_tensors(whole.state)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12)


@pytest.mark.parametrize("family", FAMILIES)
def test_loss_at_k_does_not_see_later_tokens(family):
    model = tiny_model(family)
    tokens, targets = random_tokens(2, 10), random_tokens(2, 10, seed=2)
    changed_tokens, changed_targets = tokens.clone(), targets.clone()
    k = 4
    changed_tokens[:, k + 1 :] = random_tokens(2, 5, seed=3)
    changed_targets[:, k + 1 :] = random_tokens(2, 5, seed=4)
    a = model(tokens, model.init_state(2), targets).nll
    b = model(changed_tokens, model.init_state(2), changed_targets).nll
    assert torch.equal(a[:, : k + 1], b[:, : k + 1])
    assert not torch.equal(a[:, k + 1 :], b[:, k + 1 :])


@pytest.mark.parametrize("family", FAMILIES)
def test_dropout_only_in_training(family):
    model = tiny_model(family)
    tokens = random_tokens(2, 6)
    eval_runs = [model(tokens, model.init_state(2), tokens).nll for _ in range(2)]
    assert torch.equal(*eval_runs)
    model.train()
    train_runs = [model(tokens, model.init_state(2), tokens).nll for _ in range(2)]
    assert not torch.equal(*train_runs)


@pytest.mark.parametrize("family", FAMILIES)
def test_state_is_fresh_zeros_and_returned_detached(family):
    model = tiny_model(family).train()
    state = model.init_state(3)
    assert all(t.dtype == torch.float64 and t.shape[0] == 3 and not t.any() for t in state_tensors(state))
    out = model(random_tokens(3, 5), state, random_tokens(3, 5, seed=2))
    assert out.nll.requires_grad
    assert all(not t.requires_grad and t.grad_fn is None for t in state_tensors(out.state))


@pytest.mark.parametrize("family", FAMILIES)
def test_nll_is_minus_log_prob_at_the_targets(family):
    model = tiny_model(family)
    tokens, targets = random_tokens(2, 9), random_tokens(2, 9, seed=2)
    out = model(tokens, model.init_state(2), targets)
    log_prob = model.log_prob(out.hidden)  # [B, T, V]
    assert log_prob.shape == (2, 9, 40)
    torch.testing.assert_close(log_prob.exp().sum(-1), torch.ones(2, 9, dtype=torch.float64))
    torch.testing.assert_close(out.nll, -log_prob.gather(2, targets.unsqueeze(2)).squeeze(2), rtol=0, atol=1e-12)
    assert model(tokens, model.init_state(2)).nll is None


def paper_cfg(family: str, d_inner: int) -> ModelConfig:
    """WikiText-103 vocabulary and the adaptive softmax of Merity et al.'s 151M QRNN."""
    return ModelConfig(
        family=family, n_token=267735, n_layer=4, d_model=400, d_inner=d_inner, qrnn_window=2,
        adaptive=True, cutoffs=[2800, 20000, 76000], div_val=1, tie_weight=True,
    )


def test_paper_size_parameter_counts():
    with torch.device("meta"):
        qrnn, lstm = build_rnn(paper_cfg("qrnn", 2500)), build_rnn(paper_cfg("lstm", 1390))
    embedding = 267735 * 400  # shared with the softmax (tied)
    softmax_own = 267735 + 3 * 400 + 3  # output biases, the three cluster tokens' weights and biases
    qrnn_layers = (800 * 7500 + 7500) + 2 * (2500 * 7500 + 7500) + (2500 * 1200 + 1200)
    assert qrnn.num_parameters() == embedding + softmax_own + qrnn_layers == 153_886_638
    H = 1390  # the lstm preset; LSTM layer (in, h): 4h(in + h) + 8h, torch keeping two bias vectors
    lstm_layers = (4 * H * (400 + H) + 8 * H) + 2 * (4 * H * 2 * H + 8 * H) + (4 * 400 * (H + 400) + 8 * 400)
    assert lstm.num_parameters() == embedding + softmax_own + lstm_layers == 151_129_498


def test_flops_per_token_by_hand():
    plain = dict(n_token=50, n_layer=2, d_model=8, d_inner=12, adaptive=False)
    softmax = 2 * 8 * 50
    lstm = build_rnn(ModelConfig(family="lstm", **plain))
    assert lstm.counts().flops_per_token(1000) == 2 * 4 * 12 * (8 + 12) + 2 * 4 * 8 * (12 + 8) + softmax  # 4000
    qrnn = build_rnn(ModelConfig(family="qrnn", qrnn_window=2, **plain))
    assert qrnn.counts().flops_per_token(0) == 2 * 3 * 12 * (2 * 8) + 2 * 3 * 8 * 12 + softmax  # 2528
    # Adaptive, cutoffs [20, 35], div_val 2: clusters of 20/15/15 words with 8/4/2 dimensions.
    adaptive = build_rnn(ModelConfig(family="qrnn", qrnn_window=2, **{**plain, "adaptive": True}, cutoffs=[20, 35], div_val=2))
    head = 2 * 8 * (20 + 2)  # head words and the two cluster tokens
    tails = (2 * 8 * 4 + 2 * 4 * 15) + (2 * 8 * 2 + 2 * 2 * 15)  # projection, then logits
    assert adaptive.counts().flops_per_token(0) == 2 * 3 * 12 * (2 * 8) + 2 * 3 * 8 * 12 + head + tails


def test_bad_shapes_are_clear_errors():
    with pytest.raises(TxlabError, match="qrnn_window"):
        build_rnn(ModelConfig(family="qrnn", n_token=10, qrnn_window=0))
    with pytest.raises(TxlabError, match="n_layer"):
        build_rnn(ModelConfig(family="lstm", n_token=10, n_layer=0))


@pytest.mark.parametrize("family", FAMILIES)
def test_loss_falls_on_a_deterministic_markov_chain(family):
    # Each token's successor is fixed (a random permutation): perfectly predictable after one token.
    rng = np.random.default_rng(0)
    successor = rng.permutation(16)
    stream = np.empty(8 * 33, dtype=np.int64)
    stream[0] = 0
    for i in range(1, len(stream)):
        stream[i] = successor[stream[i - 1]] if i % 33 else rng.integers(16)  # restart each row somewhere random
    rows = torch.from_numpy(stream).view(8, 33)
    tokens, targets = rows[:, :-1], rows[:, 1:]
    torch.manual_seed(0)
    model = build_rnn(ModelConfig(family=family, n_token=16, n_layer=2, d_model=64, d_inner=64))
    opt = torch.optim.Adam(model.parameters(), lr=2e-2)
    losses = []
    for _ in range(60):
        loss = model(tokens, model.init_state(8), targets).nll.mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[0] == pytest.approx(np.log(16), abs=0.1)
    assert losses[-1] < 0.1 * losses[0]


def test_embedding_init_range_is_a_setting():
    """model.rnn_embed_init sets the uniform range of the embedding and the (tied) softmax weights."""
    for width in (0.1, 1.7):
        cfg = ModelConfig(family="lstm", n_token=50, d_model=16, d_inner=24, n_layer=2, rnn_embed_init=width)
        weight = build_rnn(cfg).embedding.emb_layers[0].weight
        assert width * 0.9 < weight.abs().max().item() <= width


@pytest.mark.parametrize("family", ["lstm", "qrnn"])
def test_keep_bias_shifts_only_the_gate_on_the_previous_cell(family):
    """model.rnn_keep_bias moves the keeping gate's bias, and nothing else, from the same seed's initialisation."""
    def built(keep_bias: float) -> dict[str, torch.Tensor]:
        torch.manual_seed(0)
        cfg = ModelConfig(family=family, n_token=50, d_model=16, d_inner=24, n_layer=2, rnn_keep_bias=keep_bias)
        return build_rnn(cfg).state_dict()

    plain, kept = built(0.0), built(1.5)
    assert plain.keys() == kept.keys()
    changed = {name for name in plain if not torch.equal(plain[name], kept[name])}
    if family == "lstm":  # torch's gate order: input, forget, cell, output; keeping = forget gate up
        assert changed == {"stack.layers.0.bias_ih_l0", "stack.layers.1.bias_ih_l0"}
        for name in changed:
            shift = kept[name] - plain[name]
            hidden = shift.shape[0] // 4
            assert torch.allclose(shift[hidden : 2 * hidden], torch.full((hidden,), 1.5))
            assert not shift[:hidden].any() and not shift[2 * hidden :].any()
    else:  # [z | f | o] and the cell keeps 1 - sigmoid(f): keeping = f's bias down
        assert changed == {"stack.layers.0.linear.bias", "stack.layers.1.linear.bias"}
        for name in changed:
            shift = kept[name] - plain[name]
            width = shift.shape[0] // 3
            assert torch.allclose(shift[width : 2 * width], torch.full((width,), -1.5))
            assert not shift[:width].any() and not shift[2 * width :].any()
