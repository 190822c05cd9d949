"""`txlab recl`: RECL of a group of models, from presets (trained when missing), run directories or Hugging Face
checkpoints. One module per stage, read in this order:

- :mod:`.settings`: :class:`~.settings.ReclSettings` (a study profile's keys, ``--set``), the study file, the command line over them;
- :mod:`.groups`: each group's members resolved once (a :class:`~.groups.Member` each, once per training seed),
  checked against each other, the settings' unset values given (``collection_defaults``) and the one
  :class:`~txlab.measure.collection.Collection` every member is scored on;
- :mod:`.plan`: the plan printed before anything runs (training, token-steps, FLOPs, an estimated time);
- :mod:`.run`: ``recl_groups``, what the command does: per group one corpus load, then per training seed train what
  is missing, collect each member into a loss table (txlab.measure.losses: resumable, written once, kept in memory),
  score the group (txlab.analysis.recl, table8) and write;
- :mod:`.report`: what is written (recl.json, table8-seeds.json), the figures in words, ``--redraw`` and ``--json``.

With training seeds each preset member trains once per seed into ``<preset>-<size>-<corpus>-seed<s>/``, the group
is scored once per seed into ``<group>/seed-<s>/``, and ``<group>/table8-seeds.{csv,md,json}`` give each model's
RECL per seed and their spread (txlab.analysis.table8.seed_rows). The package carries its command's name;
``txlab.analysis.recl``, the pure-numpy metric it computes with, has the plain one.
"""
