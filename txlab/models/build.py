"""Build a language model of any family from its config, or count it without building it (the only
place that dispatches on family)."""

from __future__ import annotations

from txlab.config import ModelConfig
from txlab.errors import TxlabError, did_you_mean
from txlab.models.interface import LanguageModel, ModelCounts


def _check_vocabulary(cfg: ModelConfig) -> None:
    if cfg.n_token <= 0:
        raise TxlabError("model.n_token is not set: take it from the corpus vocabulary before building the model")


def build_model(cfg: ModelConfig) -> LanguageModel:
    """A freshly initialised model for ``cfg`` (``cfg.n_token`` must be set)."""
    _check_vocabulary(cfg)
    if cfg.family in ("xl", "vanilla"):
        from txlab.models.transformer import build_transformer

        return build_transformer(cfg)
    if cfg.family in ("lstm", "qrnn"):
        from txlab.models.rnn import build_rnn

        return build_rnn(cfg)
    if cfg.family == "hf":
        from txlab.models.hf import build_hf

        return build_hf(cfg)
    raise did_you_mean(cfg.family, ("xl", "vanilla", "lstm", "qrnn", "hf"), "model family")


def count_model(cfg: ModelConfig) -> ModelCounts:
    """The parameters, window and forward FLOPs :func:`build_model` would give ``cfg``, from the configuration
    alone: what plans and tables read, with nothing built (a family-hf model without transformers too). The
    settings :func:`build_model` refuses are refused here with the same errors."""
    _check_vocabulary(cfg)
    if cfg.family in ("xl", "vanilla"):
        from txlab.models.transformer import transformer_counts

        return transformer_counts(cfg)
    if cfg.family in ("lstm", "qrnn"):
        from txlab.models.rnn import rnn_counts

        return rnn_counts(cfg)
    if cfg.family == "hf":
        from txlab.models.hf import hf_counts

        return hf_counts(cfg)
    raise did_you_mean(cfg.family, ("xl", "vanilla", "lstm", "qrnn", "hf"), "model family")
