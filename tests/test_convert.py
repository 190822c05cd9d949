"""txlab.runs.convert: checkpoints of Hugging Face and of the authors' code imported into run directories.

Every import is checked on numbers: per-token losses over two segments with memory must match the
original model's. The Hugging Face TransfoXL tests need the optional extra (`pip install -e '.[transfoxl]'`) and skip
without it; the reference-layout tests build the authors' state dict from a txlab model, following
mem_transformer.py's layout independently of txlab.runs.convert.
"""

from __future__ import annotations

import collections
import copy
import os
import pickle
import re

import pytest
import torch
import yaml
from typer.testing import CliRunner

from txlab.cli import app
from txlab.config import DataConfig, ModelConfig
from txlab.data.corpus import load_corpus
from txlab.errors import TxlabError
from txlab.models.interface import Context
from txlab.models.transformer import build_transformer
from txlab.runs.checkpoint import load_checkpoint
from txlab.runs.convert import import_hf, import_reference, read_vocabulary
from txlab.runs.evaluate import evaluate

runner = CliRunner()

_LAYER_NAMES = {  # mem_transformer.py's names of one layer's parameters -> txlab's
    "dec_attn.qkv_net.weight": "attn.qkv_net.weight", "dec_attn.o_net.weight": "attn.o_net.weight",
    "dec_attn.r_net.weight": "attn.r_net.weight", "dec_attn.layer_norm.weight": "attn.layer_norm.weight",
    "dec_attn.layer_norm.bias": "attn.layer_norm.bias", "pos_ff.CoreNet.0.weight": "ff.core.0.weight",
    "pos_ff.CoreNet.0.bias": "ff.core.0.bias", "pos_ff.CoreNet.3.weight": "ff.core.3.weight",
    "pos_ff.CoreNet.3.bias": "ff.core.3.bias", "pos_ff.layer_norm.weight": "ff.layer_norm.weight",
    "pos_ff.layer_norm.bias": "ff.layer_norm.bias",
}


def perturbed_model(**kw):
    """A txlab Transformer-XL whose every parameter is random (layer norms and cluster logits included)."""
    base = dict(n_token=50, n_layer=2, d_model=16, n_head=2, d_head=8, d_inner=24, tgt_len=6, mem_len=6, dropout=0.0)
    torch.manual_seed(0)
    model = build_transformer(ModelConfig(**{**base, **kw})).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def reference_state_dict(model, of=lambda p: p) -> dict[str, torch.Tensor]:
    """The MemTransformerLM state dict computing the same function as a txlab model.

    ``of`` maps each parameter to what is laid out (``lambda p: p.grad`` gives the gradients)."""
    cfg, emb, crit = model.cfg, model.word_emb, model.crit
    sd = {}
    if cfg.div_val == 1:  # one table and one output layer over the whole vocabulary, one input projection
        sd["word_emb.emb_layers.0.weight"] = torch.cat([of(layer.weight) for layer in emb.emb_layers])
        sd["crit.out_layers.0.weight"] = torch.cat([of(layer.weight) for layer in crit.out_layers])
        sd["crit.out_layers.0.bias"] = torch.cat([of(layer.bias) for layer in crit.out_layers])
        if emb.emb_projs[0] is not None:
            assert all(p is emb.emb_projs[0] for p in emb.emb_projs)
            sd["word_emb.emb_projs.0"] = of(emb.emb_projs[0])
            sd.update({f"crit.out_projs.{i}": of(p) for i, p in enumerate(crit.out_projs)})
    else:  # every cluster projected, with the identity where txlab has no projection
        for i, (layer, proj, out, out_proj) in enumerate(zip(emb.emb_layers, emb.emb_projs, crit.out_layers, crit.out_projs)):
            eye = torch.eye(cfg.d_model)
            sd.update({f"word_emb.emb_layers.{i}.weight": of(layer.weight), f"word_emb.emb_projs.{i}": eye if proj is None else of(proj),
                       f"crit.out_layers.{i}.weight": of(out.weight), f"crit.out_layers.{i}.bias": of(out.bias),
                       f"crit.out_projs.{i}": eye if out_proj is None else of(out_proj)})
    if crit.cluster_weight is not None:  # the reference reads tail cluster i at head column -i
        sd["crit.cluster_weight"], sd["crit.cluster_bias"] = of(crit.cluster_weight).flip(0), of(crit.cluster_bias).flip(0)
    params = dict(model.named_parameters())
    for layer in range(cfg.n_layer):
        sd.update({f"layers.{layer}.{theirs}": of(params[f"blocks.{layer}.{ours}"]) for theirs, ours in _LAYER_NAMES.items()})
        if cfg.untie_r:
            sd[f"layers.{layer}.dec_attn.r_w_bias"], sd[f"layers.{layer}.dec_attn.r_r_bias"] = of(model.u)[layer], of(model.v)[layer]
    if not cfg.untie_r:
        sd["r_w_bias"], sd["r_r_bias"] = of(model.u)[0], of(model.v)[0]
    sd["pos_emb.inv_freq"] = 1 / 10000 ** (torch.arange(0.0, cfg.d_model, 2.0) / cfg.d_model)
    return {k: v.detach().clone() for k, v in sd.items()}


def txlab_nll(model, tokens: torch.Tensor, seg_len: int) -> torch.Tensor:
    """Per-token NLL [B, T-1] reading ``tokens`` in segments of ``seg_len``, memory carried."""
    state, out = model.init_state(tokens.size(0)), []
    with torch.no_grad():
        for start in range(0, tokens.size(1) - 1, seg_len):
            chunk = tokens[:, start : start + seg_len + 1]
            result = model(chunk[:, :-1], state, chunk[:, 1:])
            out.append(result.nll)
            state = result.state
    return torch.cat(out, dim=1)


def write_vocab(path, n: int):
    path.write_text("".join(f"w{i}\n" for i in range(n)))
    return path


def write_model_yaml(path, cfg: ModelConfig):
    keys = ("n_layer", "d_model", "n_head", "d_head", "d_inner", "d_embed", "tgt_len", "mem_len", "same_length",
            "clamp_len", "pre_lnorm", "adaptive", "cutoffs", "div_val")
    path.write_text(yaml.safe_dump({"model": {k: getattr(cfg, k) for k in keys}}))
    return path


def tokens_for(n_token: int, batch: int = 3, length: int = 13) -> torch.Tensor:
    return torch.randint(0, n_token, (batch, length), generator=torch.Generator().manual_seed(1))


# --- the reference layout (no optional dependency) -------------------------------------------------


def random_reference_layout(cfg: ModelConfig, tie_weight: bool, tie_projs: list[bool]) -> dict[str, torch.Tensor]:
    """A random MemTransformerLM state dict for ``cfg`` (shared u and v) whose tied entries are one tensor, as in the module.

    The layout of mem_transformer.py: with div_val 1 one table and one output layer for the whole
    vocabulary, one input projection (if d_embed != d_model) and an output projection per cluster;
    with div_val > 1 a table, a projection and an output layer per cluster, the head included.
    ``tie_weight`` ties every output layer, ``tie_projs[i]`` cluster i's output projection, to the input's.
    """
    gen = torch.Generator().manual_seed(3)

    def rand(*shape):
        return 0.2 * torch.randn(*shape, generator=gen, dtype=torch.float64)

    d, d_embed = cfg.d_model, cfg.d_embed or cfg.d_model
    bounds = [0, *cfg.cutoffs, cfg.n_token]
    sd = {}
    if cfg.div_val == 1:
        sd["word_emb.emb_layers.0.weight"] = rand(cfg.n_token, d_embed)
        sd["crit.out_layers.0.weight"] = sd["word_emb.emb_layers.0.weight"] if tie_weight else rand(cfg.n_token, d_embed)
        sd["crit.out_layers.0.bias"] = rand(cfg.n_token)
        if d_embed != d:
            sd["word_emb.emb_projs.0"] = rand(d, d_embed)
            sd.update({f"crit.out_projs.{i}": sd["word_emb.emb_projs.0"] if tied else rand(d, d_embed) for i, tied in enumerate(tie_projs)})
    else:
        for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            dim = d_embed // cfg.div_val**i
            table, proj = rand(hi - lo, dim), rand(d, dim)
            sd.update({f"word_emb.emb_layers.{i}.weight": table, f"word_emb.emb_projs.{i}": proj,
                       f"crit.out_layers.{i}.weight": table if tie_weight else rand(hi - lo, dim), f"crit.out_layers.{i}.bias": rand(hi - lo),
                       f"crit.out_projs.{i}": proj if tie_projs[i] else rand(d, dim)})
    if cfg.cutoffs:
        sd["crit.cluster_weight"], sd["crit.cluster_bias"] = rand(len(cfg.cutoffs), d_embed), rand(len(cfg.cutoffs))
    block_shapes = {k: v.shape for k, v in build_transformer(cfg).state_dict().items() if k.startswith("blocks.")}
    for layer in range(cfg.n_layer):
        for theirs, ours in _LAYER_NAMES.items():
            value = rand(*block_shapes[f"blocks.{layer}.{ours}"])
            sd[f"layers.{layer}.{theirs}"] = value + 1 if theirs.endswith("layer_norm.weight") else value
    sd["r_w_bias"], sd["r_r_bias"] = rand(cfg.n_head, cfg.d_head), rand(cfg.n_head, cfg.d_head)
    sd["pos_emb.inv_freq"] = 1 / 10000 ** (torch.arange(0.0, d, 2.0, dtype=torch.float64) / d)
    return sd


def reference_input(sd: dict[str, torch.Tensor], cfg: ModelConfig, tokens: torch.Tensor) -> torch.Tensor:
    """The reference's adaptive input [B, T, d_model] from its state dict."""
    if cfg.div_val == 1:
        out = sd["word_emb.emb_layers.0.weight"][tokens]
        if "word_emb.emb_projs.0" in sd:
            out = out @ sd["word_emb.emb_projs.0"].t()
    else:
        out = 0
        bounds = [0, *cfg.cutoffs, cfg.n_token]
        for i, (lo, hi) in enumerate(zip(bounds, bounds[1:])):
            in_cluster = ((tokens >= lo) & (tokens < hi)).unsqueeze(-1)
            rows = sd[f"word_emb.emb_layers.{i}.weight"][(tokens - lo).clamp(0, hi - lo - 1)]
            out = out + in_cluster * (rows @ sd[f"word_emb.emb_projs.{i}"].t())
    return out * cfg.d_model**0.5


def reference_log_probs(sd: dict[str, torch.Tensor], cfg: ModelConfig, hidden: torch.Tensor) -> torch.Tensor:
    """The reference's adaptive softmax: log-probabilities [N, n_token] of hidden states [N, d_model]."""
    bounds = [0, *cfg.cutoffs, cfg.n_token]

    def log_softmax(i, weight, bias):
        proj = sd.get(f"crit.out_projs.{i}")
        h = hidden if proj is None else hidden @ proj
        return torch.log_softmax(h @ weight.t() + bias, dim=-1)

    def layer(i):
        if cfg.div_val == 1:
            lo, hi = bounds[i], bounds[i + 1]
            return sd["crit.out_layers.0.weight"][lo:hi], sd["crit.out_layers.0.bias"][lo:hi]
        return sd[f"crit.out_layers.{i}.weight"], sd[f"crit.out_layers.{i}.bias"]

    weight, bias = layer(0)
    if not cfg.cutoffs:
        return log_softmax(0, weight, bias)
    head = log_softmax(0, torch.cat([weight, sd["crit.cluster_weight"]]), torch.cat([bias, sd["crit.cluster_bias"]]))
    parts = [head[:, : bounds[1]]]
    for i in range(1, len(bounds) - 1):  # tail cluster i's probability sits at head column -i
        parts.append(head[:, -i, None] + log_softmax(i, *layer(i)))
    return torch.cat(parts, dim=1)


class _ReferenceInput(torch.nn.Module):
    def __init__(self, sd, cfg):
        super().__init__()
        self.sd, self.cfg = sd, cfg

    def forward(self, tokens):
        return reference_input(self.sd, self.cfg, tokens)


def segment_nll(model, tokens: torch.Tensor, seg_len: int, state, log_probs=None) -> torch.Tensor:
    """Per-token NLL [B, T-1] over segments from ``state``, memory carried, with gradients; ``log_probs`` replaces
    the model's softmax."""
    out = []
    for start in range(0, tokens.size(1) - 1, seg_len):
        chunk = tokens[:, start : start + seg_len + 1]
        if log_probs is None:
            result = model(chunk[:, :-1], state, chunk[:, 1:])
            out.append(result.nll)
        else:
            result = model(chunk[:, :-1], state)
            lp = log_probs(result.hidden.reshape(-1, result.hidden.size(-1)))  # [B * T, V]
            out.append(-lp.gather(1, chunk[:, 1:].reshape(-1, 1)).view(chunk.size(0), -1))
        state = result.state
    return torch.cat(out, dim=1)


@pytest.mark.parametrize(
    "shape, tie_weight, tie_projs",
    [
        # the authors' WikiText-103 large model: div_val 4, a full-width head whose projections are not tied
        (dict(d_model=64, cutoffs=[10, 20, 30], div_val=4), True, [False, True, True, True]),
        # their WikiText-103 setup with a projected table (div_val 1, d_embed != d_model)
        (dict(d_model=16, d_embed=12, cutoffs=[10, 30], div_val=1), True, [False, True, True]),
        # their One Billion Word setup (no projection tied), here with untied output weights too
        (dict(d_model=16, cutoffs=[10, 30], div_val=2), False, [False, False, False]),
        # a plain softmax with a projection
        (dict(d_model=16, d_embed=12), True, [True]),
    ],
)
def test_imported_reference_models_keep_every_tie(tmp_path, shape, tie_weight, tie_projs):
    """Same parameter count as the source, same losses, and with dropout 0 the same gradient for every source parameter."""
    cfg = ModelConfig(n_token=50, n_layer=2, n_head=2, d_head=8, d_inner=24, tgt_len=6, mem_len=6, adaptive="cutoffs" in shape, **shape)
    source = random_reference_layout(cfg, tie_weight, tie_projs)
    torch.save(source, tmp_path / "state.pt")
    result = import_reference(tmp_path / "state.pt", tmp_path / "run", vocab_file=write_vocab(tmp_path / "vocab.txt", 50),
                              corpus="synthetic", config_file=write_model_yaml(tmp_path / "model.yaml", cfg))
    unique = {id(t): t for key, t in source.items() if key != "pos_emb.inv_freq"}
    assert result.params == sum(t.numel() for t in unique.values())
    model = load_checkpoint(result.run_dir).model.double()
    assert model.cfg.tie_weight == tie_weight and model.cfg.tie_projs == (tie_projs[0] if len(set(tie_projs)) == 1 else tie_projs)

    leaves = {}  # the source's parameters as imported (rounded to float32), tied entries one leaf
    ref = {k: leaves.setdefault(id(t), t.float().double().requires_grad_()) for k, t in source.items() if k != "pos_emb.inv_freq"}
    ref_model = copy.deepcopy(model)
    ref_model.word_emb = _ReferenceInput(ref, cfg)
    tokens = torch.randperm(50, generator=torch.Generator().manual_seed(1))[:39].view(3, 13)
    assert all(((tokens[:, 1:] >= lo) & (tokens[:, 1:] < hi)).any() for lo, hi in zip([0, *cfg.cutoffs], [*cfg.cutoffs, 50]))
    state = model.init_state(3)
    expected = segment_nll(ref_model, tokens, 6, state, lambda hidden: reference_log_probs(ref, cfg, hidden))
    imported = segment_nll(model, tokens, 6, state)
    torch.testing.assert_close(imported, expected, rtol=1e-10, atol=1e-10)
    expected.sum().backward()
    imported.sum().backward()
    body = dict(ref_model.named_parameters())
    expected_grads = {k: t.grad for k, t in ref.items() if not k.startswith("layers.") and not k.startswith("r_")}
    expected_grads.update({f"layers.{layer}.{theirs}": body[f"blocks.{layer}.{ours}"].grad
                           for layer in range(cfg.n_layer) for theirs, ours in _LAYER_NAMES.items()})
    expected_grads["r_w_bias"], expected_grads["r_r_bias"] = ref_model.u.grad[0], ref_model.v.grad[0]
    grads = reference_state_dict(model, of=lambda p: p.grad)
    del grads["pos_emb.inv_freq"]
    assert grads.keys() == expected_grads.keys()
    for key, grad in expected_grads.items():
        torch.testing.assert_close(grads[key], grad, rtol=1e-8, atol=1e-10, msg=key)


@pytest.mark.parametrize(
    "kw",
    [
        # two tail clusters (their order is reversed in the reference), div_val 2 with the head projected, shared u and v,
        # tied but for the head's projection
        dict(adaptive=True, cutoffs=[10, 30], div_val=2, full_width_proj=True, tie_projs=[False, True, True]),
        # one table with a projection (div_val 1), per-layer u and v, untied output, pre-LN, same_length, clamp_len
        dict(adaptive=True, cutoffs=[20], div_val=1, d_embed=12, untie_r=True, tie_weight=False, pre_lnorm=True,
             same_length=True, clamp_len=3, mem_len=5),
    ],
)
def test_reference_layout_round_trips_to_the_same_losses(tmp_path, kw):
    model = perturbed_model(**kw)
    torch.save(reference_state_dict(model), tmp_path / "state.pt")
    result = import_reference(tmp_path / "state.pt", tmp_path / "run", vocab_file=write_vocab(tmp_path / "vocab.txt", 50),
                              corpus="synthetic", config_file=write_model_yaml(tmp_path / "model.yaml", model.cfg))
    ckpt = load_checkpoint(result.run_dir)
    for key in ("untie_r", "tie_weight", "tie_projs", "full_width_proj"):
        assert getattr(ckpt.config.model, key) == getattr(model.cfg, key), key
    assert ckpt.vocab.symbols[:2] == ["w0", "w1"] and ckpt.meta["vocab_hash"] == ckpt.vocab.sha256
    assert result.params == model.num_parameters()
    tokens = tokens_for(50)
    expected = txlab_nll(model, tokens, seg_len=6)
    torch.testing.assert_close(txlab_nll(ckpt.model, tokens, seg_len=6), expected, rtol=0, atol=1e-5)
    assert (result.run_dir / "config.yaml").is_file() and (result.run_dir / "import.json").is_file()


def test_cli_import_then_eval_relabels_a_corpus_whose_ids_differ(tmp_path):
    """A model whose vocabulary numbers the corpus's symbols in another order scores the corpus as the original."""
    data = DataConfig(corpus="synthetic-short", synthetic_tokens=500, synthetic_eval_tokens=400)
    corpus = load_corpus(data)
    n = len(corpus.vocab)
    model = perturbed_model(n_token=n, mem_len=8, tgt_len=8)
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(2))  # model id k <-> corpus symbol perm[k]
    sd = reference_state_dict(model)
    for key in ("word_emb.emb_layers.0.weight", "crit.out_layers.0.weight", "crit.out_layers.0.bias"):
        sd[key] = sd[key][perm]
    torch.save(sd, tmp_path / "state.pt")
    (tmp_path / "vocab.txt").write_text("".join(corpus.vocab.symbols[k] + "\n" for k in perm.tolist()))
    args = ["import", "reference", str(tmp_path / "state.pt"), "--vocab", str(tmp_path / "vocab.txt"), "--data", "synthetic-short",
            "--config", str(write_model_yaml(tmp_path / "model.yaml", model.cfg)), "--set", "data.synthetic_tokens=500",
            "--set", "data.synthetic_eval_tokens=400", "--out", str(tmp_path / "run")]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "txlab eval" in result.output and str(tmp_path / "run") in result.output
    result = runner.invoke(app, ["eval", str(tmp_path / "run"), "--json", "--quiet", "--no-same-length"])
    assert result.exit_code == 0, result.output
    imported = yaml.safe_load(result.output.strip().splitlines()[-1])
    original = evaluate(model, corpus.split("valid"), 8, Context(8, False, 0), batch_size=8)
    assert imported["tokens"] == original.tokens == 399
    assert abs(imported["loss"] - original.loss) < 1e-5
    again = runner.invoke(app, args)
    assert again.exit_code == 2 and "--force" in again.output
    assert runner.invoke(app, [*args, "--force"]).exit_code == 0


def test_mismatched_state_dicts_name_every_problem(tmp_path):
    model = perturbed_model(adaptive=True, cutoffs=[10, 30], div_val=2)
    sd = reference_state_dict(model)
    del sd["layers.1.pos_ff.CoreNet.3.bias"]
    sd["layers.0.dec_attn.extra"] = torch.zeros(1)
    sd["crit.out_layers.1.weight"] = torch.zeros(20, 9)
    torch.save(sd, tmp_path / "state.pt")
    kwargs = dict(vocab_file=write_vocab(tmp_path / "vocab.txt", 50), corpus="synthetic",
                  config_file=write_model_yaml(tmp_path / "model.yaml", model.cfg))
    with pytest.raises(TxlabError) as err:
        import_reference(tmp_path / "state.pt", tmp_path / "run", **kwargs)
    message = str(err.value)
    for part in ("missing: layers.1.pos_ff.CoreNet.3.bias", "unexpected: layers.0.dec_attn.extra",
                 "wrong shape: crit.out_layers.1.weight [20, 9] (expected [20, 8])"):
        assert part in message
    assert not (tmp_path / "run").exists()
    with pytest.raises(TxlabError, match="model.n_token is 50 but the vocabulary has 49 symbols"):
        import_reference(tmp_path / "state.pt", tmp_path / "run", **{**kwargs, "vocab_file": write_vocab(tmp_path / "v49.txt", 49)},
                         overrides=["model.n_token=50"])
    with pytest.raises(TxlabError, match="no such file"):
        import_reference(tmp_path / "absent.pt", tmp_path / "run", **kwargs)
    torch.save(torch.nn.Linear(2, 2), tmp_path / "module.pt")  # what the reference train.py writes: a pickled module
    with pytest.raises(TxlabError, match="not a plain state dict"):
        import_reference(tmp_path / "module.pt", tmp_path / "run", **kwargs)
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    torch.save(reference_state_dict(model), tmp_path / "state.pt")
    with pytest.raises(TxlabError, match="not an empty or run directory"):
        import_reference(tmp_path / "state.pt", tmp_path / "busy", **kwargs, force=True)
    assert (tmp_path / "busy" / "notes.txt").is_file()


# --- vocabularies -----------------------------------------------------------------------------------


def tokenizer_state(symbols: list[str]) -> dict:
    """What a TransfoXLTokenizer pickles: its __dict__, symbols beside counters and compiled patterns."""
    return {"counter": collections.Counter(symbols), "special": ["<eos>"], "idx2sym": list(symbols),
            "sym2idx": collections.OrderedDict((s, i) for i, s in enumerate(symbols)), "pattern": re.compile(r"[^\s][!?]")}


def test_tokenizer_pickles_are_read_without_their_code(tmp_path):
    symbols = ["<eos>", "the", "<unk>", "of"]
    (tmp_path / "vocab.pkl").write_bytes(pickle.dumps(tokenizer_state(symbols)))
    torch.save(tokenizer_state(symbols), tmp_path / "zip.bin")
    torch.save(tokenizer_state(symbols), tmp_path / "legacy.bin", _use_new_zipfile_serialization=False)
    for name in ("vocab.pkl", "zip.bin", "legacy.bin"):
        vocab = read_vocabulary(tmp_path / name)
        assert vocab.symbols == symbols and vocab.unk == "<unk>", name


class _Payload:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_that_would_run_code_is_refused(tmp_path):
    marker = tmp_path / "pwned"
    state = {**tokenizer_state(["a", "b"]), "payload": _Payload(marker)}
    (tmp_path / "vocab.pkl").write_bytes(pickle.dumps(state))
    with pytest.raises(TxlabError, match=r"would call (posix|nt|os)\.system"):
        read_vocabulary(tmp_path / "vocab.pkl")
    assert not marker.exists()
    (tmp_path / "eval.pkl").write_bytes(b"\x80\x04cbuiltins\neval\n(V1+1\ntR.")
    with pytest.raises(TxlabError, match=r"builtins\.eval"):
        read_vocabulary(tmp_path / "eval.pkl")
    (tmp_path / "truncated.pkl").write_bytes(pickle.dumps(tokenizer_state(["a"]))[:-5])
    with pytest.raises(TxlabError, match="not a readable pickle"):
        read_vocabulary(tmp_path / "truncated.pkl")


def test_plain_text_vocabularies(tmp_path):
    (tmp_path / "vocab.txt").write_text("<eos>\nthe 120\n,\n<unk> 3\n")
    vocab = read_vocabulary(tmp_path / "vocab.txt")
    assert vocab.symbols == ["<eos>", "the", ",", "<unk>"] and vocab.unk == "<unk>"
    (tmp_path / "gap.txt").write_text("a\n\nb\n")
    with pytest.raises(TxlabError, match="gap.txt:2: empty line"):
        read_vocabulary(tmp_path / "gap.txt")
    with pytest.raises(TxlabError, match="no vocabulary file"):
        read_vocabulary(tmp_path / "absent.txt")


def test_hf_directory_errors_need_no_transformers(tmp_path):
    with pytest.raises(TxlabError, match="no Hugging Face model directory"):
        import_hf(tmp_path / "absent", tmp_path / "run", corpus="synthetic")
    (tmp_path / "hf").mkdir()
    with pytest.raises(TxlabError, match="no config.json"):
        import_hf(tmp_path / "hf", tmp_path / "run", corpus="synthetic")
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(TxlabError, match="not TransfoXL"):
        import_hf(tmp_path / "hf", tmp_path / "run", corpus="synthetic")
    (tmp_path / "hf" / "config.json").write_text('{"model_type": "transfo-xl", "vocab_size": 50}')
    with pytest.raises(TxlabError, match="no weights"):
        import_hf(tmp_path / "hf", tmp_path / "run", corpus="synthetic")
    torch.save({}, tmp_path / "hf" / "pytorch_model.bin")
    with pytest.raises(TxlabError, match="no vocabulary in"):
        import_hf(tmp_path / "hf", tmp_path / "run", corpus="synthetic")


# --- Hugging Face (optional extra) ------------------------------------------------------------------


HF_ATOL = 1e-4
"""Two float32 implementations of one model differ by their order of operations: over two segments with
memory about 1e-5 nats (1.14e-5 was seen); a wrong or misplaced weight moves losses by 1e-2 or more."""


def hf_transformers():
    """The optional extra, or a skip (also for transformers >= 4.38, whose TransfoXL forward is broken:
    it calls ``type_as`` without a tensor)."""
    transformers = pytest.importorskip("transformers")
    if tuple(int(x) for x in transformers.__version__.split(".")[:2]) >= (4, 38):
        pytest.skip(f"TransfoXL does not run in transformers {transformers.__version__}; install the [transfoxl] extra")
    return transformers


def hf_model(**kw):
    transformers = hf_transformers()
    base = dict(vocab_size=60, cutoffs=[20, 40], d_model=16, d_embed=16, n_head=2, d_head=8, d_inner=32, n_layer=2,
                mem_len=6, clamp_len=0, same_length=False, dropout=0.0)
    torch.manual_seed(0)
    model = transformers.TransfoXLLMHeadModel(transformers.TransfoXLConfig(**{**base, **kw})).eval()
    with torch.no_grad():  # random everywhere (cluster logits and layer norms start constant)
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return model


def hf_nll(model, tokens: torch.Tensor, seg_len: int) -> torch.Tensor:
    """Per-token NLL [B, T-1] like :func:`txlab_nll`, from an empty memory (Hugging Face would start from zeros)."""
    cfg = model.config
    mems = [torch.zeros(0, tokens.size(0), cfg.d_model) for _ in range(cfg.n_layer)]
    out = []
    with torch.no_grad():
        for start in range(0, tokens.size(1) - 1, seg_len):
            chunk = tokens[:, start : start + seg_len + 1]
            result = model(input_ids=chunk[:, :-1], mems=mems)
            out.append(-result.prediction_scores.gather(-1, chunk[:, 1:, None]).squeeze(-1))
            mems = result.mems
    return torch.cat(out, dim=1)


@pytest.mark.parametrize(
    "kw, safe",
    [
        # div_val 2 with a full-width head (its projections kept, input and output differ: tie_projs [F, T, T]),
        # per-layer u and v, safetensors (tied copies left out of the file)
        (dict(div_val=2, untie_r=True), True),
        # div_val 1 with a projection, shared u and v (also listed per layer), untied everything, pre-LN,
        # same_length with a memory shorter than the segment, clamp_len
        (dict(div_val=1, d_embed=12, untie_r=False, tie_word_embeddings=False, proj_share_all_but_first=False,
              pre_lnorm=True, same_length=True, mem_len=4, clamp_len=3), False),
    ],
)
def test_hf_checkpoints_give_the_original_losses(tmp_path, kw, safe):
    model = hf_model(**kw)
    model.save_pretrained(tmp_path / "hf", safe_serialization=safe)
    assert (tmp_path / "hf" / ("model.safetensors" if safe else "pytorch_model.bin")).is_file()
    write_vocab(tmp_path / "hf" / "vocab.txt", 60)
    result = import_hf(tmp_path / "hf", tmp_path / "run", corpus="synthetic")
    ckpt = load_checkpoint(result.run_dir)
    m = ckpt.config.model
    assert (m.untie_r, m.same_length, m.clamp_len, m.mem_len, m.pre_lnorm) == (
        model.config.untie_r, model.config.same_length, model.config.clamp_len, model.config.mem_len, model.config.pre_lnorm)
    assert result.params == model.num_parameters()  # every tie kept
    tokens = tokens_for(60)
    torch.testing.assert_close(txlab_nll(ckpt.model, tokens, seg_len=6), hf_nll(model, tokens, seg_len=6), rtol=0, atol=HF_ATOL)


def test_hf_weights_in_the_reference_layout(tmp_path):
    """The same weights, renamed and with the cluster rows reversed as the authors' code stores them."""
    model = hf_model(div_val=2, untie_r=False)
    sd = {k.removeprefix("transformer."): v for k, v in model.state_dict().items() if not k.endswith("dec_attn.r_w_bias")
          and not k.endswith("dec_attn.r_r_bias")}
    sd["crit.cluster_weight"], sd["crit.cluster_bias"] = sd["crit.cluster_weight"].flip(0), sd["crit.cluster_bias"].flip(0)
    torch.save(sd, tmp_path / "state.pt")
    overrides = ["model.adaptive=true", "model.cutoffs=[20,40]", "model.div_val=2", "model.n_layer=2", "model.d_model=16",
                 "model.n_head=2", "model.d_head=8", "model.d_inner=32", "model.mem_len=6"]
    result = import_reference(tmp_path / "state.pt", tmp_path / "run", vocab_file=write_vocab(tmp_path / "v.txt", 60),
                              corpus="synthetic", overrides=overrides)
    tokens = tokens_for(60)
    imported = load_checkpoint(result.run_dir).model
    torch.testing.assert_close(txlab_nll(imported, tokens, seg_len=6), hf_nll(model, tokens, seg_len=6), rtol=0, atol=HF_ATOL)


def test_a_real_tokenizer_pickle(tmp_path, monkeypatch):
    transformers = hf_transformers()
    pytest.importorskip("sacremoses")
    (tmp_path / "words.txt").write_text("<eos>\nthe\n,\n<unk>\n")
    tokenizer = transformers.TransfoXLTokenizer(vocab_file=str(tmp_path / "words.txt"), unk_token="<unk>")
    tokenizer.save_pretrained(tmp_path / "tok")
    assert read_vocabulary(tmp_path / "tok" / "vocab.pkl").symbols == tokenizer.idx2sym == ["<eos>", "the", ",", "<unk>"]
