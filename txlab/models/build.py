"""Build a language model of any family from its config, or count it without building it (the only
place that dispatches on family)."""

from __future__ import annotations

import importlib

from txlab.config import ModelConfig
from txlab.errors import TxlabError, did_you_mean
from txlab.models.interface import LanguageModel, ModelCounts


def _check_vocabulary(cfg: ModelConfig) -> None:
    if cfg.n_token <= 0:
        raise TxlabError("model.n_token is not set: take it from the corpus vocabulary before building the model")


_FAMILY_MODULES = {"xl": "transformer", "vanilla": "transformer", "lstm": "rnn", "qrnn": "rnn", "hf": "hf"}
"""Family -> the module under txlab.models that builds and counts it (imported on first use: hf needs transformers)."""
_FAMILY_FUNCTIONS = {
    "transformer": {"build": "build_transformer", "count": "transformer_counts"},
    "rnn": {"build": "build_rnn", "count": "rnn_counts"},
    "hf": {"build": "build_hf", "count": "hf_counts"},
}


def _family_function(cfg: ModelConfig, job: str):
    """The function of ``cfg``'s family that does ``job`` ('build' or 'count'), after the checks every family shares."""
    _check_vocabulary(cfg)
    if cfg.family not in _FAMILY_MODULES:
        raise did_you_mean(cfg.family, _FAMILY_MODULES, "model family")
    module = _FAMILY_MODULES[cfg.family]
    return getattr(importlib.import_module(f"txlab.models.{module}"), _FAMILY_FUNCTIONS[module][job])


def build_model(cfg: ModelConfig) -> LanguageModel:
    """A freshly initialised model for ``cfg`` (``cfg.n_token`` must be set)."""
    return _family_function(cfg, "build")(cfg)


def count_model(cfg: ModelConfig) -> ModelCounts:
    """The count of the model :func:`build_model` gives ``cfg`` (its ``counts()``: parameters, window, forward FLOPs),
    from the configuration alone: what plans and tables read, with nothing built (a family-hf model without
    transformers too). The settings :func:`build_model` refuses are refused here with the same errors."""
    return _family_function(cfg, "count")(cfg)
