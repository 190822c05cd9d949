"""The study drivers, one module per command that runs a study: ``ablate`` (`txlab ablate`), ``recl``
(`txlab recl`) and ``speed`` (`txlab speed`).

A driver reads a study YAML's profile and the command line into a settings dataclass, plans, runs the
measurement libraries (txlab.train, txlab.losses and txlab.recl, txlab.speed) and writes the tables.
They live in a package of their own so that each can carry its command's name: ``txlab.recl`` is the
pure-numpy RECL metric and ``txlab.speed`` the Table 9 measurement, which their drivers use.
"""
