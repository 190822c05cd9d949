"""The side-by-side harness for the authors' code, on a stand-in clone with their interface and their 2019 habits."""

from __future__ import annotations

import textwrap

import pytest
import torch

from txlab.config import ModelConfig
from txlab.errors import TxlabError
from txlab.measure import authors_code
from txlab.measure.bench import bench_model, bench_table_markdown

MICRO = {"micro": {"n_layer": 1, "d_model": 16, "n_head": 2, "d_head": 8, "d_inner": 32, "n_token": 50}}

# MemTransformerLM's constructor and forward(data, target, *mems) -> [loss] + new_mems, time-major [T, B];
# like the original it parses torch.version.cuda at import and masks with uint8 tensors.
STAND_IN = textwrap.dedent('''
    import torch
    from torch import nn
    CUDA_MAJOR = int(torch.version.cuda.split('.')[0])
    CALLS = []

    class MemTransformerLM(nn.Module):
        def __init__(self, n_token, n_layer, n_head, d_model, d_head, d_inner, dropout, dropatt, tie_weight=True,
                     d_embed=None, div_val=1, tie_projs=[False], pre_lnorm=False, tgt_len=None, ext_len=None,
                     mem_len=None, cutoffs=[], adapt_inp=False, same_length=False, attn_type=0, clamp_len=-1,
                     sample_softmax=-1):
            super().__init__()
            self.mem_len, self.attn_type = mem_len, attn_type
            self.emb = nn.Embedding(n_token, d_model)
            self.layer_norm = nn.LayerNorm(d_model)
            self.out = nn.Linear(d_model, n_token)

        def forward(self, data, target, *mems):
            CALLS.append((self.attn_type, tuple(data.shape), tuple(target.shape), len(mems), self.training))
            qlen = data.size(0)
            mask = torch.triu(torch.ones(qlen, qlen), diagonal=1).byte()
            hidden = self.layer_norm(self.emb(data))
            mixed = torch.softmax(torch.ones(qlen, qlen).masked_fill(mask, -float('inf')), -1) @ hidden.transpose(0, 1)
            logits = self.out(mixed.transpose(0, 1)[-target.size(0):])
            loss = nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), target.reshape(-1), reduction='none')
            loss = loss.view(target.size(0), -1)
            return [loss] if self.mem_len == 0 else [loss, hidden.detach()[-self.mem_len:]]
''')


@pytest.fixture
def clone(tmp_path):
    (tmp_path / "pytorch").mkdir()
    (tmp_path / "pytorch" / "mem_transformer.py").write_text(STAND_IN)
    return tmp_path


def test_loading_a_clone_restores_torch_afterwards(clone):
    cuda, fill = torch.version.cuda, torch.Tensor.masked_fill
    model_class = authors_code.load_model_class(clone)
    assert model_class.__name__ == "MemTransformerLM"
    assert torch.version.cuda == cuda and torch.Tensor.masked_fill is fill
    with pytest.raises(RuntimeError, match="boolean"):  # outside the harness, uint8 masks fail as on today's torch
        torch.zeros(2).masked_fill(torch.ones(2, dtype=torch.uint8), 1.0)


def test_a_folder_without_their_model_is_a_clear_error(tmp_path):
    with pytest.raises(TxlabError, match="kimiyoung/transformer-xl"):
        authors_code.model_file(tmp_path)


def test_their_workloads_get_the_shapes_and_modes_of_their_scripts(clone):
    model_class = authors_code.load_model_class(clone)
    calls = model_class.forward.__globals__["CALLS"]
    cfg = ModelConfig(**MICRO["micro"])
    tokens = torch.randint(0, 50, (3, 9))
    train, params = authors_code.train_step(model_class, cfg, tokens)
    train(), train()
    evaluate, _ = authors_code.eval_step(model_class, cfg, tokens, mem_len=16)
    evaluate()
    vanilla, _ = authors_code.vanilla_step(model_class, cfg, torch.randint(0, 50, (3, 12)), torch.randint(0, 50, (3,)))
    vanilla()
    assert calls == [
        (0, (8, 3), (8, 3), 0, True),  # train.py: first segment without memory
        (0, (8, 3), (8, 3), 1, True),  # then the memory carried over
        (0, (8, 3), (8, 3), 0, False),  # eval.py
        (3, (12, 3), (1, 3), 0, False),  # Al-Rfou et al.'s model scores only the window's last position
    ]
    assert params == sum(p.numel() for p in model_class(50, 1, 2, 16, 8, 32, 0.0, 0.0).parameters())


def test_bench_rows_carry_the_side_by_side_ratio(clone):
    rows = bench_model(MICRO, modes=("train", "eval_mem16", "vanilla_win8", "generate_mem16"), batch_size=2, seg_len=8,
                       threads=1, repeats=1, warmup=0, authors_code_dir=clone)
    for row in rows[:3]:
        assert row.reference_source == "side by side" and row.reference_params > 0
        assert row.speedup == pytest.approx(row.tokens_per_s / row.reference_tokens_per_s)
    assert rows[3].reference_tokens_per_s is None and rows[3].speedup is None  # they have no one-token generation mode
    assert "(recorded)" not in bench_table_markdown(rows)
