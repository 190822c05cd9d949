"""A plain torch LSTM on recall-small, outside txlab's model code: does the embedding's initial width decide
whether an Adam-trained LSTM learns the latch?

    python results/pilots-recall-cpu/v3/plain-lstm/plain_lstm.py 0.1 > results/pilots-recall-cpu/v3/plain-lstm/init-0.1.log
    python results/pilots-recall-cpu/v3/plain-lstm/plain_lstm.py 1.7 > results/pilots-recall-cpu/v3/plain-lstm/init-1.7.log

One LSTM layer of 256 over 128-wide embeddings, a projection to 128 and the softmax tied to the
embedding (as txlab's RNNs tie theirs); Adam at lr 3e-3, gradient norm clipped at 0.25, 8 streams of
128-token segments with the state carried, 1,500 steps, one thread, seed 0. The only argument is the
half-width of the uniform initial embedding. Prints, every 100 steps, the mean training loss on latch
emissions over those steps (ideal 1.39 nats with the latch in view, 3.47 without).
"""

import sys

import numpy as np
import torch
from torch import nn

from txlab.data.synthetic import LATCH_EMISSION, generate, get_spec

STREAMS, SEGMENT, STEPS, HIDDEN, WIDTH = 8, 128, 1500, 256, 128


class TiedLSTM(nn.Module):
    def __init__(self, vocab: int, init_width: float):
        super().__init__()
        self.embedding = nn.Embedding(vocab, WIDTH)
        nn.init.uniform_(self.embedding.weight, -init_width, init_width)
        self.lstm = nn.LSTM(WIDTH, HIDDEN, batch_first=True)
        self.proj = nn.Linear(HIDDEN, WIDTH)

    def forward(self, tokens, state):
        hidden, state = self.lstm(self.embedding(tokens), state)
        return self.proj(hidden) @ self.embedding.weight.T, state  # [B, T, V]


def main() -> None:
    init_width = float(sys.argv[1])
    torch.set_num_threads(1)
    torch.manual_seed(0)
    spec = get_spec("recall-small")
    text = generate(spec, 1_000_000, seed=0)
    n = len(text) // STREAMS
    tokens = torch.tensor(text.tokens[: n * STREAMS].astype(np.int64)).view(STREAMS, n)  # [B, n]
    roles = torch.tensor(text.role[: n * STREAMS].astype(np.int64)).view(STREAMS, n)  # [B, n]
    model = TiedLSTM(spec.vocab_size, init_width)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    state, position, emission_losses = None, 0, []
    for step in range(1, STEPS + 1):
        if position + SEGMENT + 1 > n:
            position, state = 0, None
        x = tokens[:, position : position + SEGMENT]
        y = tokens[:, position + 1 : position + SEGMENT + 1]
        is_emission = roles[:, position + 1 : position + SEGMENT + 1] == LATCH_EMISSION
        position += SEGMENT
        logits, state = model(x, state)
        state = tuple(s.detach() for s in state)
        nll = nn.functional.cross_entropy(logits.reshape(-1, spec.vocab_size), y.reshape(-1), reduction="none").view_as(y)
        optimizer.zero_grad()
        nll.mean().backward()
        nn.utils.clip_grad_norm_(model.parameters(), 0.25)
        optimizer.step()
        emission_losses.append(nll[is_emission].mean().item())
        if step % 100 == 0:
            print(f"step {step}: latch emission loss {np.mean(emission_losses[-100:]):.3f}", flush=True)


if __name__ == "__main__":
    main()
