import pytest

from txlab.config import update_dataclass
from txlab.errors import TxlabError
from txlab.presets import resolve_preset
from txlab.runs.footprint import fit_length, training_memory

VOCAB = 50


def tiny(**model):
    return update_dataclass(resolve_preset("xl128m", "tiny"), {"model": model})


def test_cpu_training_memory_is_exact_and_grows_with_the_segment_and_the_memory():
    base = tiny(mem_len=0, tgt_len=16)
    assert training_memory(base, VOCAB) == training_memory(base, VOCAB)  # deterministic: bisection is exact
    longer = training_memory(tiny(mem_len=0, tgt_len=32), VOCAB)
    with_memory = training_memory(tiny(mem_len=16, tgt_len=16), VOCAB)
    assert longer > training_memory(base, VOCAB) and with_memory > training_memory(base, VOCAB)
    # the memory itself is held: 2 layers x 4 streams x 16 rows x d 32 in fp32, at least
    assert with_memory - training_memory(base, VOCAB) >= 2 * 4 * 16 * 32 * 4
    # parameters, gradients and two Adam moments: at least four copies of the weights
    from txlab.models.build import build_model

    n_params = build_model(update_dataclass(base.model, {"n_token": VOCAB})).num_parameters()
    assert training_memory(base, VOCAB) > 4 * 4 * n_params


def test_fit_length_bisects_to_the_largest_fitting_multiple():
    cfg = tiny()
    measure = lambda c: c.model.tgt_len ** 2  # noqa: E731
    assert fit_length(cfg, "model.tgt_len", 1000, measure, step=4) == (28, 784)
    assert fit_length(cfg, "model.tgt_len", 1024, measure, step=4) == (32, 1024)
    with pytest.raises(TxlabError, match="even model.tgt_len=4"):
        fit_length(cfg, "model.tgt_len", 10, measure, step=4)
    with pytest.raises(TxlabError, match="does not constrain"):
        fit_length(cfg, "model.tgt_len", 10**9, measure, step=4, limit=64)
    with pytest.raises(TxlabError, match="not an integer config key"):
        fit_length(cfg, "model.pos_enc", 1000, measure)


def test_without_recurrence_a_longer_segment_fits_the_same_memory_when_attention_dominates():
    # Table 10's effect: a small vocabulary so the attention over the memory is what costs
    recur = training_memory(tiny(mem_len=64, tgt_len=16), VOCAB)
    value, used = fit_length(tiny(mem_len=0), "model.tgt_len", recur, lambda c: training_memory(c, VOCAB), step=2)
    assert value > 16 and used <= recur
