"""Text in, token ids and ground truth out.

``vocab`` (the vocabulary and its hash), ``textdata`` (a user's own text and tokenizers), ``corpora``
(the corpus registry and the encoded cache), ``batching`` (the paper's streams and evaluation order),
``download`` (the only network code), ``synthetic`` (built-in corpora with planted dependencies and
their exact ground truth) and ``diagnostics`` (a model's loss by token role beside the ideal model's).
"""
