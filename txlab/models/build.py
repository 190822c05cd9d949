"""Build a language model of any family from its config (the only place that dispatches on family)."""

from __future__ import annotations

from txlab.config import ModelConfig
from txlab.errors import TxlabError, did_you_mean
from txlab.models.interface import LanguageModel


def build_model(cfg: ModelConfig) -> LanguageModel:
    """A freshly initialised model for ``cfg`` (``cfg.n_token`` must be set)."""
    if cfg.n_token <= 0:
        raise TxlabError("model.n_token is not set: take it from the corpus vocabulary before building the model")
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
