"""LSTM and QRNN language models: the recurrent baselines of the paper's RECL comparison (Table 8).

Both follow Merity et al.: the AWD-LSTM (2018a, "Regularizing and Optimizing LSTM Language Models")
and the QRNN of "An Analysis of Neural Language Modeling at Multiple Scales" (2018b), which is the
paper's QRNN baseline. Layer l maps size[l] -> size[l+1] with sizes [E, H, ..., H, E]: every layer
has hidden size H except the last, whose output has the embedding size E so that the softmax can
share the embedding matrix (tied weights).

QRNN layer (fo-pooling), with window w (cfg.qrnn_window in the first layer, 1 in the others):
    z_t, f_t, o_t = tanh, sigmoid, sigmoid of one linear map of [x_{t-w+1}, ..., x_t]
    c_t = f_t * z_t + (1 - f_t) * c_{t-1}
    h_t = o_t * c_t
The linear map runs over all timesteps in one matmul; only the elementwise recurrence loops.

Dropout is variational ("locked", Gal & Ghahramani 2016), as in both papers: one mask per sequence,
shared by all timesteps; cfg.dropout on the embeddings and on the last layer's output,
cfg.dropout_hidden between layers.

Shapes (B batch, T timesteps in this chunk, E = cfg.d_model, H_l = size of layer l, V vocabulary):
    tokens, targets  [B, T]        the interface is batch-first
    x inside         [T, B, *]     time-major: what the recurrences step over
    hidden           [B, T, E]     the softmax input, returned in LMOutput
    nll              [B, T]
    LSTM state       tuple over layers of (h [B, H_l], c [B, H_l])
    QRNN state       tuple over layers of (c [B, H_l], x_prev [B, w_l - 1, size_in_l]), x_prev being
                     the last w_l - 1 inputs of the layer (empty for w_l = 1)
Every state tensor has the batch first.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import once_differentiable

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.models.interface import LanguageModel, LMOutput, ModelCounts, State, check_target_shape
from txlab.models.softmax import AdaptiveEmbedding, AdaptiveLogSoftmax, vocabulary_counts


class LockedDropout(nn.Module):
    """Dropout with one mask per sequence, shared by all timesteps of x [T, B, d]."""

    def __init__(self, p: float):
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0:
            return x
        keep = 1 - self.p
        mask = x.new_empty(1, *x.shape[1:]).bernoulli_(keep) / keep  # [1, B, d]
        return x * mask


class ForgetMult(torch.autograd.Function):
    """The fo-pooling recurrence c_t = a_t * c_{t-1} + b_t, for a, b [T, B, H] and c_0 [B, H] -> c [T, B, H].

    Autograd through a Python loop records one graph node per step and is slow backwards (T=128,
    B=8, H=1024, 2 threads: 5 ms forward, 255 ms backward). Looping in place in both directions costs
    3 ms + 5 ms and is exact. TorchScript loops measured no faster; a log-depth parallel scan was
    10x slower (it does log2(T) passes over [T, B, H] instead of one).
    The backward pass is the same recurrence in reverse: dL/dc_t = g_t + a_{t+1} * dL/dc_{t+1}.
    """

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        cells = torch.empty_like(b)
        prev = c0
        for t in range(b.shape[0]):
            prev = torch.addcmul(b[t], a[t], prev, out=cells[t])
        ctx.save_for_backward(a, cells, c0)
        return cells

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_cells: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        a, cells, c0 = ctx.saved_tensors
        grad_c = torch.empty_like(cells)  # dL/dc_t through the output at t and through c_{t+1}
        nxt = grad_c[-1].copy_(grad_cells[-1])
        for t in range(cells.shape[0] - 2, -1, -1):
            nxt = torch.addcmul(grad_cells[t], a[t + 1], nxt, out=grad_c[t])
        grad_a = torch.empty_like(a)  # dL/da_t = dL/dc_t * c_{t-1}
        torch.mul(grad_c[1:], cells[:-1], out=grad_a[1:])
        torch.mul(grad_c[0], c0, out=grad_a[0])
        return grad_a, grad_c, a[0] * grad_c[0]


class QRNNLayer(nn.Module):
    """One QRNN layer with fo-pooling: x [T, B, d_in] -> h [T, B, d_out]."""

    def __init__(self, d_in: int, d_out: int, window: int):
        super().__init__()
        self.d_in, self.d_out, self.window = d_in, d_out, window
        # One map from the window of inputs, oldest first, to the three gates [z | f | o].
        self.linear = nn.Linear(window * d_in, 3 * d_out)

    def forward(self, x: torch.Tensor, c: torch.Tensor, x_prev: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [T, B, d_in], c [B, d_out], x_prev [B, w-1, d_in] -> h [T, B, d_out], last c, last w-1 inputs."""
        T = x.shape[0]
        x_ext = torch.cat([x_prev.transpose(0, 1), x])  # [w-1+T, B, d_in]
        source = torch.cat([x_ext[k : k + T] for k in range(self.window)], dim=-1)  # [T, B, w*d_in]
        z, f, o = self.linear(source).chunk(3, dim=-1)  # each [T, B, d_out]
        forget = torch.sigmoid(f)
        cells = ForgetMult.apply(1 - forget, forget * torch.tanh(z), c)  # [T, B, d_out]
        h = torch.sigmoid(o) * cells
        return h, cells[-1], x_ext[T:].transpose(0, 1)  # x_prev: [B, w-1, d_in]


class QRNNStack(nn.Module):
    """QRNN layers with locked dropout between them: x [T, B, sizes[0]] -> [T, B, sizes[-1]]."""

    def __init__(self, sizes: list[int], first_window: int, dropout_hidden: float):
        super().__init__()
        windows = [first_window] + [1] * (len(sizes) - 2)
        self.layers = nn.ModuleList(QRNNLayer(d_in, d_out, w) for d_in, d_out, w in zip(sizes, sizes[1:], windows))
        self.drop = LockedDropout(dropout_hidden)

    def init_state(self, batch_size: int, like: torch.Tensor) -> State:
        return tuple(
            (like.new_zeros(batch_size, layer.d_out), like.new_zeros(batch_size, layer.window - 1, layer.d_in))
            for layer in self.layers
        )

    def forward(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        next_state = []
        for i, (layer, (c, x_prev)) in enumerate(zip(self.layers, state)):
            x, c, x_prev = layer(x, c, x_prev)
            next_state.append((c.detach(), x_prev.detach()))
            if i < len(self.layers) - 1:
                x = self.drop(x)
        return x, tuple(next_state)

    @torch.no_grad()
    def add_keep_bias(self, bias: float) -> None:
        """Shift every layer's gate on the previous cell towards keeping it: that gate is 1 - sigmoid(f), so f's bias goes down."""
        for layer in self.layers:
            layer.linear.bias[layer.d_out : 2 * layer.d_out] -= bias  # [z | f | o]


class LSTMStack(nn.Module):
    """Single-layer torch LSTMs (each its own size) with locked dropout between them: x [T, B, sizes[0]] -> [T, B, sizes[-1]]."""

    def __init__(self, sizes: list[int], dropout_hidden: float):
        super().__init__()
        self.layers = nn.ModuleList(nn.LSTM(d_in, d_out) for d_in, d_out in zip(sizes, sizes[1:]))
        self.drop = LockedDropout(dropout_hidden)

    def init_state(self, batch_size: int, like: torch.Tensor) -> State:
        return tuple(
            (like.new_zeros(batch_size, layer.hidden_size), like.new_zeros(batch_size, layer.hidden_size))
            for layer in self.layers
        )

    def forward(self, x: torch.Tensor, state: State) -> tuple[torch.Tensor, State]:
        next_state = []
        for i, (layer, (h, c)) in enumerate(zip(self.layers, state)):
            x, (h, c) = layer(x, (h.unsqueeze(0), c.unsqueeze(0)))  # torch's state is [num_layers=1, B, H_l]
            next_state.append((h[0].detach(), c[0].detach()))
            if i < len(self.layers) - 1:
                x = self.drop(x)
        return x, tuple(next_state)

    @torch.no_grad()
    def add_keep_bias(self, bias: float) -> None:
        """Shift every layer's forget gate towards keeping the cell (torch's gate order is input, forget, cell, output)."""
        for layer in self.layers:
            layer.bias_ih_l0[layer.hidden_size : 2 * layer.hidden_size] += bias


def _check_shape(cfg: ModelConfig) -> None:
    if cfg.n_layer < 1:
        raise TxlabError(f"model.n_layer must be at least 1 for an RNN, got {cfg.n_layer}")
    if cfg.family == "qrnn" and cfg.qrnn_window < 1:
        raise TxlabError(f"model.qrnn_window must be at least 1, got {cfg.qrnn_window}")


def _layer_sizes(cfg: ModelConfig) -> list[int]:
    """Widths from the embedding through every recurrent layer back to the embedding's: d_model, d_inner, ..., d_model."""
    return [cfg.d_model] + [cfg.d_inner] * (cfg.n_layer - 1) + [cfg.d_model]


class RNNLanguageModel(LanguageModel):
    """Embedding -> LSTM or QRNN stack -> (adaptive) softmax, with the shared LanguageModel interface."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        _check_shape(cfg)
        self.cfg = cfg
        d_embed = cfg.d_embed or cfg.d_model
        cutoffs = cfg.cutoffs if cfg.adaptive else []
        self.embedding = AdaptiveEmbedding(cfg.n_token, d_embed, cfg.d_model, cutoffs, cfg.div_val, scale=False,
                                           full_width_proj=cfg.full_width_proj)
        self.drop = LockedDropout(cfg.dropout)
        sizes = _layer_sizes(cfg)
        if cfg.family == "lstm":
            self.stack: LSTMStack | QRNNStack = LSTMStack(sizes, cfg.dropout_hidden)
        else:
            self.stack = QRNNStack(sizes, cfg.qrnn_window, cfg.dropout_hidden)
        self.softmax = AdaptiveLogSoftmax(cfg.n_token, d_embed, cfg.d_model, cutoffs, cfg.div_val, full_width_proj=cfg.full_width_proj)
        self.vocab_size = cfg.n_token
        # Uniform initial embeddings: without the transformer's sqrt(d) input scale, N(0, 0.02) inputs
        # would be too small for the gates (cfg.rnn_embed_init says how wide, and why it depends on the optimizer).
        for layer in [*self.embedding.emb_layers, *self.softmax.out_layers]:
            nn.init.uniform_(layer.weight, -cfg.rnn_embed_init, cfg.rnn_embed_init)
        self.softmax.tie_to(self.embedding, cfg.tie_weight, cfg.tie_projs)
        if cfg.rnn_keep_bias:
            self.stack.add_keep_bias(cfg.rnn_keep_bias)

    def init_state(self, batch_size: int) -> State:
        return self.stack.init_state(batch_size, like=self.embedding.emb_layers[0].weight)

    def forward(self, tokens: torch.Tensor, state: State, targets: torch.Tensor | None = None) -> LMOutput:
        check_target_shape(tokens, targets)
        B, T = tokens.shape
        x = self.drop(self.embedding(tokens.t()))  # [T, B, E]
        x, state = self.stack(x, state)  # [T, B, E]
        hidden = self.drop(x).transpose(0, 1).contiguous()  # [B, T, E]
        nll = None
        if targets is not None:
            nll = self.softmax.nll(hidden.view(B * T, -1), targets.reshape(B * T)).view(B, T)  # [B*T, E], [B*T] -> [B, T]
        return LMOutput(nll, hidden, state)

    def log_prob(self, hidden: torch.Tensor) -> torch.Tensor:
        flat = self.softmax.log_prob(hidden.reshape(-1, hidden.shape[-1]))  # [N, V]
        return flat.view(*hidden.shape[:-1], -1)  # [*, V]

    def counts(self) -> ModelCounts:
        """:func:`rnn_counts` of the model's configuration."""
        return rnn_counts(self.cfg)


def rnn_counts(cfg: ModelConfig) -> ModelCounts:
    """The parameters and FLOPs of the model :func:`build_rnn` gives ``cfg``, without building it: the matmuls of the
    recurrent layers' maps and of the softmax, ``n_keys`` ignored. Not counted: the embedding lookup (a gather; its
    adaptive projections when div_val > 1), biases and elementwise gate arithmetic."""
    _check_shape(cfg)
    vocabulary = vocabulary_counts(cfg.n_token, cfg.d_embed or cfg.d_model, cfg.d_model, list(cfg.cutoffs) if cfg.adaptive else [], cfg.div_val,
                                   cfg.full_width_proj, cfg.tie_weight, cfg.tie_projs)
    sizes = _layer_sizes(cfg)
    if cfg.family == "lstm":  # four gates from [x_t, h_{t-1}], each with two biases (torch's LSTM)
        maps = [4 * d_out * (d_in + d_out) for d_in, d_out in zip(sizes, sizes[1:])]
        biases = [2 * 4 * d_out for d_out in sizes[1:]]
    else:  # three gates from a window of inputs, the first layer's qrnn_window wide
        windows = [cfg.qrnn_window] + [1] * (len(sizes) - 2)
        maps = [w * d_in * 3 * d_out for w, d_in, d_out in zip(windows, sizes, sizes[1:])]
        biases = [3 * d_out for d_out in sizes[1:]]
    return ModelCounts(parameters=vocabulary.parameters + sum(maps) + sum(biases), max_context=None, layers=1, key_flops=0,
                       query_flops=2 * sum(maps), attend_flops=0, other_flops=0, output_flops=vocabulary.output_flops)


def build_rnn(cfg: ModelConfig) -> LanguageModel:
    """A freshly initialised LSTM or QRNN language model for ``cfg`` (family 'lstm' or 'qrnn')."""
    if cfg.family not in ("lstm", "qrnn"):
        raise TxlabError(f"build_rnn builds families 'lstm' and 'qrnn', not {cfg.family!r}")
    return RNNLanguageModel(cfg)
