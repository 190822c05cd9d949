"""Pure functions of tables: no module here imports torch (a test holds this).

``recl`` (the RECL metric, its grid and its spread over training seeds), ``recl_limits`` (RECL on
known-answer tables), ``claims`` (paired tests of the ablation claims over seeds) and ``report``
(tables and figures of every study).
"""
