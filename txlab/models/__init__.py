"""The language models, all behind one interface (``interface.LanguageModel``).

``interface`` (the interface, ``Context`` and ``ModelCounts``, the one count of a model's parameters and FLOPs),
``softmax`` (adaptive input and softmax), ``attention`` (multi-head attention and the positional schemes' scores),
``kernels`` (what attention runs on), ``eval_cache`` (Transformer-XL's cached evaluation state), ``transformer``
(the Transformer-XL family: every positional encoding, recurrence on or off, the vanilla Transformer),
``rnn`` (LSTM and QRNN), ``hf`` (Hugging Face causal LMs behind the same interface) and ``build``
(one ``build_model(cfg)`` for every family, and ``count_model(cfg)``: the count ``model.counts()`` gives,
without building it). Analysis code never branches on the family.
"""
