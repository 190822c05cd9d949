"""A run directory and everything that makes or reads one.

``checkpoint`` (weights and resumable state), ``zoo`` (which presets are trained, and where),
``train`` (the trainer), ``evaluate`` (the one loop that reads a stream chunk by chunk carrying the
state), ``capacity`` and ``footprint`` (the memory a step needs), ``convert`` (other checkpoints
imported), ``launch`` (runs as scheduler jobs) and ``plan`` (the cost a long command prints first).
"""
