"""txlab: a toolkit to reproduce and extend the analyses of Transformer-XL (Dai et al., 2019)."""

__version__ = "0.1.0"
