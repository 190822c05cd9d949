"""The study drivers, one module per command that runs a study: ``ablate`` (`txlab ablate`, its study file
and the runs it expands into in ``ablate_study``), ``recl`` (`txlab recl`) and ``speed`` (`txlab speed`).

A driver reads a study YAML's profile (txlab.study) and the command line into a settings dataclass, plans, runs the
measurement libraries (txlab.runs.train, txlab.measure.losses and txlab.analysis.recl, txlab.measure.speed) and writes the tables.
They live in a package of their own so that each can carry its command's name: ``txlab.analysis.recl`` is the
pure-numpy RECL metric and ``txlab.measure.speed`` the Table 9 measurement, which their drivers use.
"""
