"""Text in, token ids and ground truth out.

``vocab`` (the vocabulary and its hash), ``registry`` (the real corpora: names, files, tokenisation rules,
download sources), ``cache`` (the encoded-corpus cache), ``formats`` (reading the registry's files and
encoding them), ``hf_folders`` (reading a Hugging Face folder or Hub id without running its code),
``tokenizers`` and ``textdata`` (a user's own text: its tokenizers, then its configuration, files, name
and encoding), ``corpus`` (the :class:`~txlab.data.corpus.Corpus` and loading
any corpus by name), ``batching`` (the paper's streams and evaluation order), ``download`` (the only
network code), ``synthetic`` (built-in corpora with planted dependencies and their exact ground truth)
and ``diagnostics`` (a model's loss by token role beside the ideal model's).
"""
