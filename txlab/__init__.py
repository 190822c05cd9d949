"""txlab: a toolkit to reproduce and extend the analyses of Transformer-XL (Dai et al., 2019).

The Python API in a few names (docs/api.md): ``load_model`` (a txlab run directory or ``hf:PATH``),
``run_tokens`` and ``encode_text`` (token ids for it), ``context_losses`` (losses at exact context
lengths), ``group_recl`` (the paper's metric over a group; the module txlab.analysis.recl holds the metric itself),
``word_context_losses`` (losses in words, for models with different tokenizers) and ``perplexity``. They load on first use, so
``import txlab`` stays light (and torch-free for the pure-numpy metric modules).
"""

__version__ = "0.1.0"

API = ("load_model", "run_tokens", "encode_text", "context_losses", "ContextLosses", "group_recl", "word_context_losses", "perplexity")


def __getattr__(name: str):
    if name in API:
        from txlab import api

        return getattr(api, name)
    raise AttributeError(f"module 'txlab' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *API])
