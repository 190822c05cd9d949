"""Measurements that run models: they produce the tables that ``txlab.analysis`` reads.

``losses`` (per-token losses at controlled context lengths), ``speed`` (Table 9's timing), ``bench``
(throughput benchmarks), ``generate`` (sampling), ``attention`` (attention maps) and ``authors_code``
(the authors' model loaded from a user's clone, for side-by-side timing).
"""
