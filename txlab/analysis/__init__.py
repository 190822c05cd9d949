"""Pure functions of tables: no module here imports torch (a test holds this).

The metrics: ``recl`` (the RECL metric, its grid and its spread over training seeds), ``recl_limits``
(RECL on known-answer tables), ``claims`` (paired tests of the ablation claims over seeds). The
tables and figures of each study, from the files runs wrote: ``table8`` and ``recl_figures``
(`txlab recl`), ``ablation`` and ``learned`` (`txlab ablate`), ``table9`` (`txlab speed`), ``roles``
and ``curves`` (`txlab roles`, `txlab curves`), over what they share: ``figures`` (saving, names,
styles) and ``run_logs`` (a run directory's metrics and label).
"""
