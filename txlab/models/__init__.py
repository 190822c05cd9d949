"""The language models, all behind one interface (``interface.LanguageModel``).

``interface`` (the interface and ``Context``), ``softmax`` (adaptive input and softmax), ``transformer``
(the Transformer-XL family: every positional encoding, recurrence on or off, the vanilla Transformer),
``rnn`` (LSTM and QRNN), ``hf`` (Hugging Face causal LMs behind the same interface) and ``build``
(one ``build_model(cfg)`` for every family, and ``count_model(cfg)``: its parameters, window and FLOPs
without building it). Analysis code never branches on the family.
"""
