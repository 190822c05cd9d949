"""Built-in corpora with planted long-range dependencies: offline, deterministic, with ground truth.

Real corpora cannot tell you how far back a model *should* look. These can: every token carries the
context it needs and the loss of an ideal model with and without that context, so RECL (and any other
"how much context is used" measure) can be checked against a known answer.

The generative process
----------------------
One fixed "language" (shared by all variants, so a model trained on one can be scored on another) is
sampled with a seed. A text of n tokens is a *background* stream into which *facts* are planted.

* Background: a sparse first-order Markov chain over ``n_background`` symbols. Each symbol has exactly
  four successors, taken with probabilities ``step_probs`` (0.6, 0.25, 0.1, 0.05: about 1.03 nats a
  token). The chain runs through the whole text, skipping over planted events.
* A fact is a key and ``fact_len`` values. Its *source* is written once, as 2 * fact_len + 1 tokens::

      h_1 .. h_L  k  v_1 .. v_L          (hints, key, values)

  The key k is uniform over ``n_keys`` keys; each hint h_j is uniform over ``n_hints`` hints, and the
  value v_j is uniform over the ``values_per_hint`` values of the group that h_j names. So a source
  value costs only log(values_per_hint) to a model that sees its hint L + 1 tokens back.
* The fact's *copy* (a recall) comes D tokens after the source (key to key), as ``k v_1 .. v_L``. D is
  uniform on [min_distance, max_distance]. A copied value is one of n_hints * values_per_hint rare
  symbols: without its source it costs log(4096) = 8.3 nats, the most of any token, and with the
  source in view it costs nothing. Copies make up ``copy_fraction`` of all tokens (13% by default),
  so the hardest 10% of tokens for a short-context model are, by construction, the copied values.
* Facts never overlap; no other event with the same key lies between a source and its copy, so
  "find the previous occurrence of the current token and copy what follows" (an induction head)
  resolves every copied token. Events are laid out on a lattice of 3L + 1 = 13-token slots (one event
  per slot, at a random offset), which keeps generation vectorised and D exactly uniform; event starts
  therefore have a weak period-13 structure that only absolute-position models could exploit, and
  that the oracle below ignores.

Variants
--------
``synthetic``, ``-short``, ``-long`` and ``-local`` speak one language (5,312 symbols) and differ in how
far back copies reach. The ``synthetic-small*`` variants speak a smaller one (128 keys, 16 hints x 32
values: 784 symbols; the same background chain) that the cpu-size models learn to copy in minutes;
a copied value out of view costs ln 512 = 6.2 nats there.

The recall family
-----------------
``recall-small``, ``recall-small-local`` and ``recall`` are a second process, built so that every model
family learns what a context measurement needs (the copy family's 4-hint facts ask an RNN to buffer
four ordered symbols, and its grouped values let a transformer stop at the group). Over the same
background chain it plants:

* *Latches* (``n_latches``): a latch speaks in two-token events: its own marker (``R<j>`` or
  ``E<j>``: which latch, set or emit), then a *register* (share ``register_fraction``), which sets one
  of ``latch_groups`` groups, or an *emission*, drawn uniformly from the ``symbols_per_group`` symbols
  of the latch's current group. The gap to the latch's next event is near (2..latch_near_max_gap)
  with probability ``latch_near_fraction``, else far (up to latch_max_gap): the near holds teach a
  recurrent cell to latch at all, the far ones measure how long it holds. Latches share the register
  and emission symbols (only the marker says whose they are), which keeps each symbol frequent
  enough to learn. An emission costs ln(symbols_per_group) with its latch's previous event in view
  (a register or an emission: both show the group) and ln(groups * symbols) without, so its needed
  context is the distance to that event. The marker makes the ideal loss reachable: a model that
  holds the latch pays for *when* a latch speaks on the marker, not on the symbol.
* *Associative recall* in the style of MQAR (Arora et al. 2023): a source ``S v1 .. vL k`` and, D
  tokens later (marker to marker), its recall ``Q k v1 .. vL`` (L = values_per_fact, 1). The values
  come *before* the key in the source, so the recall is one match on the key's own token (the recall
  key against the source key) that reads what precedes it; written key first, a recall needs the
  two-step induction match (the recall key against the token *before* each value). Facts are dense
  (one every 12.5 tokens), so a near window often holds several sources and only the key says which
  one; keys are unique among pending facts; values are uniform over ``n_values`` with no group structure. D is near
  (uniform on min_distance..near_max_distance) with probability ``near_fraction``, else far (up to
  max_distance): abundant near recalls let the circuit form early, the far ones measure reach.
  Events lie on a lattice of 2L + 3-token slots.

This is the fourth design. The first two (four latches with gaps uniform up to 200, half the recalls
far) taught a cpu-size Transformer-XL no recall in 2,000 steps and an LSTM no latch at all; in the
third (sources ``S k v1 .. v4``, one fact per 33 tokens) the XL learned a recall that ignores the key:
with about one source in the near window, copying from whatever source lies 12..24 back does as well
(results/pilots-recall-cpu).

=================  ===============================  ===================  ===================
token              needed_context                   oracle_nll_with      oracle_nll_without
=================  ===============================  ===================  ===================
latch marker       0                                0                    0
register           0                                ln latch_groups      ln latch_groups
latch emission     distance to the latch's          ln symbols_per_group ln(groups * symbols)
                   previous event
S, Q markers       0                                0                    0
source value       0                                ln n_values          ln n_values
source key         distance to the previous source  0                    ln n_keys
                   key
recall key         D - L (the source key)           0                    ln n_keys
recalled value     D + 1 (the source value; the     0                    ln n_values
                   source key that names it is
                   nearer)
=================  ===============================  ===================  ===================

(Background tokens as below.) Keys follow a fixed cyclic order, so a source key is the successor of
the previous source key (the text's first source key costs ln n_keys with or without context), and a
key comes back only n_keys sources later: within the training span a recall's key names one source.

Ground truth (per target position t)
------------------------------------
``needed_context[t]`` is the smallest c such that x_{t-c} .. x_{t-1} holds what resolves x_t:

=================  ===============================  ===================  ===================
token              needed_context                   oracle_nll_with      oracle_nll_without
=================  ===============================  ===================  ===================
background         distance to previous background  -ln p(step)          ln n_background
                   token (0 for the first one)
hint               0                                ln n_hints           ln n_hints
source key         0                                ln n_keys            ln n_keys
source value       fact_len + 1 (its hint)          ln values_per_hint   ln n_values
copy key           D (the source key)               0                    ln n_keys
copied value       D + 1 (the source value and the  0                    ln n_values
                   token before it, which is
                   matched against x_{t-1})
=================  ===============================  ===================  ===================

The oracle is the ideal model of this process that is told each position's *role* (which positions are
background, hints, keys, values, and which fact a copy recalls) but not the tokens: roles carry no
content, and with that convention every entry above is exact. (A trained model does not know when a
recall starts, so it cannot reach 0 on copy keys; it can at best narrow the key down to the facts
defined in its window, which is itself a long-range dependency reaching back at most max_distance.)
``oracle_loss(c)`` is the per-token loss of that oracle when it sees exactly c tokens: the "with" loss
where c >= needed_context, else the "without" loss. The largest needed_context is max_distance + 1.
"""

from __future__ import annotations

import dataclasses
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from txlab.errors import TxlabError, did_you_mean
from txlab.fileio import write_atomic

# Roles of a position in the generated text (what the oracle is told).
BACKGROUND, HINT, SOURCE_KEY, SOURCE_VALUE, COPY_KEY, COPY_VALUE = range(6)
ROLE_NAMES = ("background", "hint", "source_key", "source_value", "copy_key", "copy_value")

# The language's fixed structure (successor table) comes from this seed, not from the sampling seed,
# so every split and every variant speaks the same language.
_LANGUAGE_SEED = 20190109
_SPLIT_INDEX = {"train": 0, "valid": 1, "test": 2}
_STEP_DELTAS = np.array([1, 2, 3, 4])


def _step_probs_problem(step_probs: tuple[float, ...]) -> str:
    """What is wrong with a background chain's step probabilities ('' when nothing is)."""
    if len(step_probs) != len(_STEP_DELTAS) or abs(sum(step_probs) - 1) > 1e-9:
        return f"step_probs must be {len(_STEP_DELTAS)} probabilities summing to 1"
    return ""


@dataclass(frozen=True)
class SyntheticSpec:
    """One synthetic corpus: the language's sizes and where its long-range dependencies reach."""

    name: str
    description: str
    min_distance: int = 8
    """Shortest copy distance D (source key to copy key); must exceed fact_len."""
    max_distance: int = 999
    """Longest copy distance D; the longest needed context is max_distance + 1."""
    copy_fraction: float = 0.13
    """Target fraction of all tokens that are copied values (reached unless the text is very short)."""
    n_background: int = 128
    step_probs: tuple[float, ...] = (0.6, 0.25, 0.1, 0.05)
    n_keys: int = 1024
    n_hints: int = 64
    values_per_hint: int = 64
    fact_len: int = 4

    @property
    def n_values(self) -> int:
        return self.n_hints * self.values_per_hint

    @property
    def vocab_size(self) -> int:
        return self.n_background + self.n_hints + self.n_keys + self.n_values

    @property
    def max_context(self) -> int:
        """The largest needed_context of any token: the corpus's true horizon."""
        return self.max_distance + 1

    role_names = ROLE_NAMES
    distance_roles = {"copy_distance": (COPY_VALUE, 1)}
    """Roles whose loss is shown by distance: name -> (role, needed_context - distance)."""

    def with_horizon(self, max_context: int) -> SyntheticSpec:
        """The same corpus with copies reaching back at most ``max_context`` tokens."""
        return dataclasses.replace(self, max_distance=max_context - 1)

    def distance_range(self, name: str) -> tuple[int, int]:
        """[lo, hi) of the distances of the ``distance_roles`` entry ``name``."""
        return self.min_distance, self.max_distance + 1

    def symbols(self) -> list[str]:
        """Symbol names in id order: background, hints, keys, values (roughly by falling frequency)."""
        return (
            [f"b{i:03d}" for i in range(self.n_background)]
            + [f"h{i:02d}" for i in range(self.n_hints)]
            + [f"k{i:04d}" for i in range(self.n_keys)]
            + [f"v{i:04d}" for i in range(self.n_values)]
        )

    def check(self) -> None:
        if not self.fact_len < self.min_distance <= self.max_distance:
            raise TxlabError(
                f"synthetic corpus {self.name!r}: need fact_len < min_distance <= max_distance, "
                f"got {self.fact_len}, {self.min_distance}, {self.max_distance}"
            )
        if problem := _step_probs_problem(self.step_probs):
            raise TxlabError(f"synthetic corpus {self.name!r}: {problem}")
        if not 0 <= self.copy_fraction < 0.25:
            raise TxlabError(f"synthetic corpus {self.name!r}: copy_fraction must lie in [0, 0.25)")


# Roles of the recall family (BACKGROUND is shared: the background chain is the same process).
LATCH_MARKER, REGISTER, LATCH_EMISSION, SOURCE_MARKER, FACT_KEY, FACT_VALUE, RECALL_MARKER, RECALL_KEY, RECALLED_VALUE = range(1, 10)
RECALL_ROLE_NAMES = (
    "background", "latch_marker", "register", "latch_emission", "source_marker", "source_key", "source_value", "recall_marker", "recall_key", "recalled_value",
)


@dataclass(frozen=True)
class RecallSpec:
    """One corpus of the recall family: background chain, latches and associative recall (module docstring)."""

    name: str
    description: str
    min_distance: int = 12
    """Shortest recall distance D (source marker to recall marker); at least the lattice slot (2 * values_per_fact + 3)."""
    near_max_distance: int = 24
    """Near recalls have D uniform on [min_distance, near_max_distance]."""
    max_distance: int = 199
    """Far recalls have D uniform on (near_max_distance, max_distance]; the longest needed context is max_distance + 1."""
    near_fraction: float = 0.75
    """Share of recalls that are near: abundant near copies let the induction circuit form early."""
    recall_fraction: float = 0.08
    """Target fraction of all tokens that are recalled values (with one value a fact: a fact every 12.5 tokens)."""
    values_per_fact: int = 1
    """Values of a fact: a source is ``S v1 .. vL k``, its recall ``Q k v1 .. vL``."""
    n_background: int = 128
    step_probs: tuple[float, ...] = (0.6, 0.25, 0.1, 0.05)
    n_keys: int = 64
    """Keys, taken in a fixed cyclic order (a key returns n_keys sources later): at least 64 x the 5-token slot = 320
    tokens later in recall-small, so within the training span (256) the only source with a recall's key is its own."""
    n_values: int = 256
    """Values carry no group structure: a recalled value out of view costs ln n_values."""
    n_latches: int = 2
    """Independent latches, each with its own markers; they share the register and emission symbols, so
    each symbol is frequent enough to learn, and only the marker says which latch a token belongs to."""
    latch_groups: int = 8
    """Groups a register can set."""
    symbols_per_group: int = 4
    """Emission symbols of one group: an emission costs ln symbols_per_group with its latch in view, ln(groups * symbols) without."""
    latch_max_gap: int = 200
    """Events of one latch are spaced by at most this many tokens (about; exactly at most that)."""
    latch_near_max_gap: int = 8
    """Near gaps are uniform on 2..latch_near_max_gap: short holds teach a recurrent cell to latch at all."""
    latch_near_fraction: float = 0.75
    """Share of near gaps; the others are uniform on (latch_near_max_gap, latch_max_gap] and measure reach."""
    register_fraction: float = 0.3
    """Share of a latch's tokens that are registers (a new group); the rest emit from the current group."""

    role_names = RECALL_ROLE_NAMES
    distance_roles = {"copy_distance": (RECALLED_VALUE, 1), "latch_distance": (LATCH_EMISSION, 0)}
    """Roles whose loss is shown by distance: name -> (role, needed_context - distance)."""

    @property
    def n_registers(self) -> int:
        return self.latch_groups

    @property
    def n_emissions(self) -> int:
        return self.n_registers * self.symbols_per_group

    @property
    def event_len(self) -> int:
        """Tokens of a source or recall event: marker, key, values."""
        return 2 + self.values_per_fact

    @property
    def slot(self) -> int:
        """The lattice slot of fact events: the shortest that keeps every distance reachable."""
        return 2 * self.event_len - 1

    @property
    def vocab_size(self) -> int:
        return self.n_background + 2 * self.n_latches + self.n_registers + self.n_emissions + 2 + self.n_keys + self.n_values

    @property
    def max_context(self) -> int:
        """The largest needed_context of any token: the corpus's true horizon."""
        return max(self.max_distance + 1, self.latch_max_gap)

    def with_horizon(self, max_context: int) -> RecallSpec:
        """The same corpus with recalls and latch gaps reaching back at most ``max_context`` tokens."""
        return dataclasses.replace(self, max_distance=max_context - 1, latch_max_gap=max_context)

    def distance_range(self, name: str) -> tuple[int, int]:
        """[lo, hi) of the distances of the ``distance_roles`` entry ``name``."""
        return (self.min_distance, self.max_distance + 1) if name == "copy_distance" else (2, self.latch_max_gap + 1)

    def symbols(self) -> list[str]:
        """Symbol names in id order: background, latch markers (set, emit), registers, emissions, the two fact markers, keys, values."""
        return (
            [f"b{i:03d}" for i in range(self.n_background)]
            + [f"{kind}{j}" for j in range(self.n_latches) for kind in ("R", "E")]
            + [f"r{g:02d}" for g in range(self.latch_groups)]
            + [f"e{g:02d}s{m}" for g in range(self.latch_groups) for m in range(self.symbols_per_group)]
            + ["S", "Q"]
            + [f"k{i:03d}" for i in range(self.n_keys)]
            + [f"v{i:04d}" for i in range(self.n_values)]
        )

    def check(self) -> None:
        problems = []
        if not self.slot <= self.min_distance <= self.near_max_distance:
            problems.append(f"need {self.slot} <= min_distance <= near_max_distance, got {self.min_distance}, {self.near_max_distance}")
        if self.max_distance < self.min_distance:
            problems.append(f"max_distance {self.max_distance} is below min_distance {self.min_distance}")
        if not 0 <= self.recall_fraction * 2 * self.event_len / max(self.values_per_fact, 1) <= 0.5:
            problems.append(f"recall_fraction must leave half the text to the background: at most {self.values_per_fact / (4 * self.event_len):.3f}")
        if not 0 <= self.near_fraction <= 1 or not 0 <= self.latch_near_fraction <= 1 or not 0 < self.register_fraction <= 1:
            problems.append("near_fraction and latch_near_fraction must lie in [0, 1], register_fraction in (0, 1]")
        if self.values_per_fact < 1:
            problems.append("values_per_fact must be positive")
        if min(self.latch_max_gap, self.latch_near_max_gap) < 2 or min(self.n_latches, self.latch_groups, self.symbols_per_group) < 1:
            problems.append("latch_max_gap and latch_near_max_gap must be at least 2, and n_latches, latch_groups and symbols_per_group positive")
        if problem := _step_probs_problem(self.step_probs):
            problems.append(problem)
        if problems:
            raise TxlabError(f"synthetic corpus {self.name!r}: " + "; ".join(problems))


# Sizes of the small language (see VARIANTS): a copied value costs ln 512 = 6.2 nats without its
# source, above a source key's ln 128 = 4.9, so context-starved copies stay the hardest tokens.
_SMALL_LANGUAGE = {"n_keys": 128, "n_hints": 16, "values_per_hint": 32}

VARIANTS: dict[str, SyntheticSpec] = {
    spec.name: spec
    for spec in (
        SyntheticSpec("synthetic", "copies up to 1000 tokens back (the default RECL grid 100..1000)", 8, 999),
        SyntheticSpec("synthetic-short", "copies up to 200 tokens back", 8, 199),
        SyntheticSpec("synthetic-long", "copies up to 3000 tokens back", 8, 2999),
        SyntheticSpec("synthetic-local", "copies at most 32 tokens back: no long-range dependency (Table 7 style)", 8, 31),
        # The small language: the same process with 128 keys and 16 x 32 values (784 symbols), sized so
        # that the cpu-size models (about 1M parameters, ~1M training tokens) learn to copy.
        *(
            SyntheticSpec(name, description, 8, max_distance, **_SMALL_LANGUAGE)
            for name, description, max_distance in (
                ("synthetic-small", "small language, copies up to 500 tokens back: beyond the cpu training segment (128) and span (256)", 499),
                ("synthetic-small-short", "small language, copies up to 200 tokens back (the cpu RECL grid 20..240)", 199),
                ("synthetic-small-local", "small language, copies at most 32 tokens back: no long-range dependency", 31),
            )
        ),
        # The recall family: latches an RNN can hold, and recalls of values without group structure,
        # half of them near, so that every model family learns what the measurement needs.
        RecallSpec("recall-small", "recall family at cpu scale: latches and recalls up to 200 tokens back (the cpu RECL grid 20..240)"),
        RecallSpec("recall-small-local", "recall family at cpu scale, no recall or latch more than 32 tokens back",
                   max_distance=31, near_max_distance=31, latch_max_gap=32, n_latches=1),  # one latch: events every ~17 tokens
        # More latches and fewer recalls, so that the hardest targets include far latch emissions: there an RNN's
        # RECL reads how far it holds a latch (on recall-small it reads the same whatever the reach)
        RecallSpec("recall-small-latches", "recall family at cpu scale with 6 latches and 6% recalled values: an RNN's RECL reads its "
                   "latch reach (the cpu RECL grid 20..240)", n_latches=6, recall_fraction=0.06),
        RecallSpec("recall", "recall family, latches and recalls up to 1000 tokens back (the default RECL grid 100..1000)",
                   max_distance=999, latch_max_gap=1000, n_keys=256, n_values=1024),
    )
}


def get_spec(name: str, max_context: int = 0) -> SyntheticSpec | RecallSpec:
    """The named variant, optionally with its horizon moved to ``max_context`` (0 keeps the variant's)."""
    if name not in VARIANTS:
        raise did_you_mean(name, VARIANTS, "synthetic corpus")
    spec = VARIANTS[name]
    if max_context:
        spec = spec.with_horizon(max_context)
    spec.check()
    return spec


@dataclass
class SyntheticText:
    """A generated text and its ground truth, all arrays of length n (see the module docstring)."""

    spec: SyntheticSpec | RecallSpec
    tokens: np.ndarray
    """[n] uint16 token ids."""
    role: np.ndarray
    """[n] int8, one of BACKGROUND .. COPY_VALUE."""
    needed_context: np.ndarray
    """[n] int32: smallest context that resolves each token."""
    oracle_nll_with: np.ndarray
    """[n] float32 nats: the oracle's loss when it sees needed_context tokens or more."""
    oracle_nll_without: np.ndarray
    """[n] float32 nats: the oracle's loss when it sees fewer."""

    def __len__(self) -> int:
        return len(self.tokens)

    def oracle_loss(self, context: int, unresolved: np.ndarray | None = None) -> np.ndarray:
        """[n] per-token loss (nats) of the ideal model that sees exactly ``context`` tokens back; with ``unresolved``
        ([n] bool), of an ideal model that never resolves those tokens (one that lacks a skill: a recall, a long hold)."""
        resolved = context >= self.needed_context
        if unresolved is not None:
            resolved &= ~unresolved
        return np.where(resolved, self.oracle_nll_with, self.oracle_nll_without)

    def stats(self) -> dict[str, float | int]:
        """Token mix and horizon, as documented numbers (used by `txlab data info` and the tests)."""
        n = len(self)
        copied = self.role == self.spec.distance_roles["copy_distance"][0]
        return {
            "tokens": n,
            **{f"fraction_{name}": float(np.mean(self.role == r)) for r, name in enumerate(self.spec.role_names)},
            "fraction_copied": float(np.mean(copied)),
            "copied_value_min_context": int(self.needed_context[copied].min()) if copied.any() else 0,
            "copied_value_max_context": int(self.needed_context[copied].max()) if copied.any() else 0,
            "oracle_nll_full_context": float(self.oracle_nll_with.mean()),
            "oracle_nll_no_context": float(self.oracle_loss(0).mean()),
        }


def _language(spec: SyntheticSpec) -> np.ndarray:
    """The background chain's symbol permutation: state z emits symbol perm[z]; z -> z + delta."""
    return np.random.default_rng(_LANGUAGE_SEED).permutation(spec.n_background)


def _place_facts(spec: SyntheticSpec, n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping facts: source starts and copy distances (key to key), sorted by source start.

    A source is 2L + 1 tokens with its key at offset L, a copy L + 1 tokens starting with its key, on
    slots of 3L + 1 tokens (see :func:`_place_pairs`).
    """
    L = spec.fact_len
    target = int(round(spec.copy_fraction * n / L))
    draw = lambda size: rng.integers(spec.min_distance, spec.max_distance + 1, size)  # noqa: E731
    return _place_pairs(n, 2 * L + 1, L + 1, L, 3 * L + 1, target, draw, rng)


def _place_pairs(
    n: int, src_len: int, copy_len: int, lead: int, slot: int, target: int, draw_distance, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """``target`` non-overlapping (source, copy) event pairs: source starts and distances D, by source start.

    A copy starts ``lead + D`` tokens after its source starts (D is measured key to key). The text is
    cut into slots of ``slot`` tokens holding at most one event each, the rest background; a slot of at
    least src_len + copy_len - 1 tokens leaves enough room for offsets that every distance is reachable,
    so D keeps the distribution ``draw_distance(size)`` draws from. Each round, free slots propose a
    source with a drawn D; a proposal is kept if its copy lands in a slot that is still free and that no
    other proposal of the round claims first (in random order).
    """
    n_slots = n // slot
    kind = np.zeros(n_slots, dtype=np.int8)  # 0 free, 1 source, 2 copy
    starts: list[np.ndarray] = []
    distances: list[np.ndarray] = []
    placed = 0
    for _ in range(32):
        need = target - placed
        free = np.flatnonzero(kind == 0)
        if need <= 0 or len(free) < 2:
            break
        src = free[rng.random(len(free)) < 0.5]
        dist = draw_distance(len(src))
        # Source offset within its slot: uniform over the offsets whose copy fits inside one slot
        # (among any copy_len consecutive offsets at least one does).
        copy_if_zero = src * slot + lead + dist
        fits = (copy_if_zero[:, None] + np.arange(slot - src_len + 1)) % slot <= slot - copy_len
        offset = np.argmax(rng.random(fits.shape) * fits, axis=1)
        copy_start = copy_if_zero + offset
        target_slot = copy_start // slot
        proposing = np.zeros(n_slots + 1, dtype=bool)
        proposing[src] = True
        ok = target_slot < n_slots
        ok[ok] = (kind[target_slot[ok]] == 0) & ~proposing[target_slot[ok]]
        order = rng.permutation(np.flatnonzero(ok))
        _, first = np.unique(target_slot[order], return_index=True)
        keep = order[np.sort(first)][:need]
        kind[src[keep]] = 1
        kind[target_slot[keep]] = 2
        starts.append(src[keep] * slot + offset[keep])
        distances.append(dist[keep])
        placed += len(keep)
    start = np.concatenate(starts) if starts else np.zeros(0, np.int64)
    dist = np.concatenate(distances) if distances else np.zeros(0, np.int64)
    order = np.argsort(start, kind="stable")
    return start[order], dist[order]


def _draw_keys(spec: SyntheticSpec, key_pos: np.ndarray, copy_pos: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Uniform keys, redrawn until no event with the same key lies between a source and its copy."""
    n_facts = len(key_pos)
    keys = rng.integers(0, spec.n_keys, n_facts)
    pos = np.concatenate([key_pos, copy_pos])
    for _ in range(32):
        both = np.concatenate([keys, keys])
        order = np.lexsort((pos, both))
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        bad = rank[n_facts:] - rank[:n_facts] != 1  # copy must directly follow its source
        if not bad.any():
            break
        keys[bad] = rng.integers(0, spec.n_keys, int(bad.sum()))
    return keys


def build_text(spec: SyntheticSpec, n_tokens: int, fact_starts: np.ndarray, distances: np.ndarray, rng: np.random.Generator) -> SyntheticText:
    """Fill a given fact layout with tokens and compute the ground truth (``generate`` draws the layout)."""
    L = spec.fact_len
    n_facts = len(fact_starts)
    fact_starts = np.asarray(fact_starts, dtype=np.int64)
    distances = np.asarray(distances, dtype=np.int64)
    key_pos = fact_starts + L
    copy_pos = key_pos + distances
    hint_pos = fact_starts[:, None] + np.arange(L)  # [F, L]
    value_pos = key_pos[:, None] + 1 + np.arange(L)  # [F, L]
    copied_pos = copy_pos[:, None] + 1 + np.arange(L)  # [F, L]

    tokens = np.zeros(n_tokens, dtype=np.uint16)
    role = np.full(n_tokens, BACKGROUND, dtype=np.int8)
    needed = np.zeros(n_tokens, dtype=np.int32)
    nll_with = np.zeros(n_tokens, dtype=np.float32)
    nll_without = np.zeros(n_tokens, dtype=np.float32)

    hint_base = spec.n_background
    key_base = hint_base + spec.n_hints
    value_base = key_base + spec.n_keys
    keys = _draw_keys(spec, key_pos, copy_pos, rng)
    hints = rng.integers(0, spec.n_hints, (n_facts, L))
    values = hints * spec.values_per_hint + rng.integers(0, spec.values_per_hint, (n_facts, L))

    ln = np.log
    for pos, r, tok, need, w, wo in (
        (hint_pos, HINT, hint_base + hints, 0, ln(spec.n_hints), ln(spec.n_hints)),
        (key_pos, SOURCE_KEY, key_base + keys, 0, ln(spec.n_keys), ln(spec.n_keys)),
        (value_pos, SOURCE_VALUE, value_base + values, L + 1, ln(spec.values_per_hint), ln(spec.n_values)),
        (copy_pos, COPY_KEY, key_base + keys, distances, 0.0, ln(spec.n_keys)),
        (copied_pos, COPY_VALUE, value_base + values, distances[:, None] + 1, 0.0, ln(spec.n_values)),
    ):
        tokens[pos] = tok
        role[pos] = r
        needed[pos] = need
        nll_with[pos] = w
        nll_without[pos] = wo

    text = SyntheticText(spec, tokens, role, needed, nll_with, nll_without)
    _fill_background(text, rng)
    return text


def _fill_background(text: SyntheticText, rng: np.random.Generator) -> None:
    """Write the background chain into every BACKGROUND position of ``text``: a random walk
    z -> z + delta (mod n_background), emitted through a fixed permutation."""
    spec = text.spec
    bg = np.flatnonzero(text.role == BACKGROUND)
    if not len(bg):
        return
    step = np.searchsorted(np.cumsum(spec.step_probs), rng.random(len(bg)), side="right")
    step = np.minimum(step, len(_STEP_DELTAS) - 1)  # guards float rounding at the top edge
    walk = np.concatenate([[0], np.cumsum(_STEP_DELTAS[step[1:]])])
    state = (rng.integers(spec.n_background) + walk) % spec.n_background
    text.tokens[bg] = _language(spec)[state]
    text.needed_context[bg[1:]] = np.diff(bg)
    text.oracle_nll_with[bg[1:]] = -np.log(np.asarray(spec.step_probs))[step[1:]]
    text.oracle_nll_with[bg[0]] = np.log(spec.n_background)
    text.oracle_nll_without[bg] = np.log(spec.n_background)


def _near_or_far(lo: int, near_hi: int, hi: int, near_fraction: float, size: int, rng: np.random.Generator) -> np.ndarray:
    """``size`` integers: uniform on lo..near_hi with probability ``near_fraction``, else on (near_hi, hi]."""
    near = rng.integers(lo, min(near_hi, hi) + 1, size)
    if hi <= near_hi:
        return near
    far = rng.integers(near_hi + 1, hi + 1, size)
    return np.where(rng.random(size) < near_fraction, near, far)


def _draw_recall_distances(spec: RecallSpec, size: int, rng: np.random.Generator) -> np.ndarray:
    return _near_or_far(spec.min_distance, spec.near_max_distance, spec.max_distance, spec.near_fraction, size, rng)


def _place_latches(spec: RecallSpec, occupied: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """Start positions of each latch's two-token events (marker, then register or emission symbol), in text order.

    A latch's next event goes to the last position at most ``gap`` after its previous one where two
    free positions begin (gap near or far, as the spec's fields say), or, when none lies there, to the first
    one after it (a few tokens further at most, since fact events are short). Latches are
    placed one after another, each on the positions the earlier ones left free.
    """
    n = len(occupied)
    index = np.arange(n)
    placed = []
    for _ in range(spec.n_latches):
        pair_free = ~occupied & ~np.append(occupied[1:], True)  # positions i and i + 1 both free
        last_free = np.maximum.accumulate(np.where(pair_free, index, -1))  # last pair start <= i
        next_free = np.minimum.accumulate(np.where(pair_free, index, n)[::-1])[::-1]  # first pair start >= i
        # events are at least 2 tokens apart, so n // 2 + 1 gaps are more than the text needs
        gaps = _near_or_far(2, spec.latch_near_max_gap, spec.latch_max_gap, spec.latch_near_fraction, n // 2 + 1, rng)
        starts = []
        prev = int(next_free[0]) if n else n
        for gap in gaps.tolist():
            if prev >= n:
                break
            starts.append(prev)
            target = prev + gap
            if target >= n:
                break
            candidate = int(last_free[target])
            prev = candidate if candidate >= prev + 2 else (int(next_free[prev + 2]) if prev + 2 < n else n)
        latch = np.asarray(starts, dtype=np.int64)
        occupied[latch] = occupied[latch + 1] = True
        placed.append(latch)
    return placed


def _generate_recall(spec: RecallSpec, n: int, rng: np.random.Generator) -> SyntheticText:
    """A text of the recall family with its ground truth (module docstring, 'The recall family')."""
    target = int(round(spec.recall_fraction * n / spec.values_per_fact))
    starts, distances = _place_pairs(
        n, spec.event_len, spec.event_len, 0, spec.slot, target, lambda size: _draw_recall_distances(spec, size, rng), rng
    )
    text = SyntheticText(
        spec, np.zeros(n, np.uint16), np.full(n, BACKGROUND, np.int8), np.zeros(n, np.int32), np.zeros(n, np.float32), np.zeros(n, np.float32)
    )
    latch_marker_base = spec.n_background
    register_base = latch_marker_base + 2 * spec.n_latches
    emission_base = register_base + spec.n_registers
    marker_base = emission_base + spec.n_emissions
    key_base = marker_base + 2
    value_base = key_base + spec.n_keys

    def put(pos, role, token, needed, with_, without) -> None:
        text.tokens[pos], text.role[pos], text.needed_context[pos] = token, role, needed
        text.oracle_nll_with[pos], text.oracle_nll_without[pos] = with_, without

    L = spec.values_per_fact
    recall_start = starts + distances
    source_key = starts + 1 + L  # S v1 .. vL k
    # Keys in a fixed cyclic order: the next source's key is the previous one's successor (a short-range rule
    # with an exact oracle), and a key comes back only n_keys sources later, at least n_keys slots further on.
    first_key = int(rng.integers(spec.n_keys))
    keys = (first_key + np.arange(len(starts))) % spec.n_keys
    reused_while_pending = starts[spec.n_keys:] < recall_start[: max(len(starts) - spec.n_keys, 0)]
    if reused_while_pending.any():
        raise TxlabError(f"synthetic corpus {spec.name!r}: more than its {spec.n_keys} keys' facts pending at once; give it more keys")
    values = rng.integers(0, spec.n_values, (len(starts), L))
    ln = np.log
    # Markers are the role itself (the oracle is told roles): free with or without context.
    put(starts, SOURCE_MARKER, marker_base, 0, 0.0, 0.0)
    put(starts[:, None] + 1 + np.arange(L), FACT_VALUE, value_base + values, 0, ln(spec.n_values), ln(spec.n_values))
    previous_key = np.concatenate([[0], source_key[:-1]])
    put(source_key, FACT_KEY, key_base + keys, np.where(np.arange(len(starts)) > 0, source_key - previous_key, 0),
        np.where(np.arange(len(starts)) > 0, 0.0, ln(spec.n_keys)), ln(spec.n_keys))
    put(recall_start, RECALL_MARKER, marker_base + 1, 0, 0.0, 0.0)
    put(recall_start + 1, RECALL_KEY, key_base + keys, distances - L, 0.0, ln(spec.n_keys))
    # Q k v1 .. vL: each recalled value lies D + 1 after its source value (the farthest token it needs)
    put(recall_start[:, None] + 2 + np.arange(L), RECALLED_VALUE, value_base + values, distances[:, None] + 1, 0.0, ln(spec.n_values))

    occupied = text.role != BACKGROUND
    for latch, starts in enumerate(_place_latches(spec, occupied, rng)):
        if not len(starts):
            continue
        is_register = rng.random(len(starts)) < spec.register_fraction
        is_register[0] = True  # a latch starts set
        group = rng.integers(0, spec.latch_groups, len(starts))
        # an emission's group is the one its latch's last register set
        last_register = np.maximum.accumulate(np.where(is_register, np.arange(len(starts)), 0))
        group = group[last_register]
        registers, emissions = starts[is_register], starts[~is_register]
        # The marker says which latch speaks and whether it sets or emits, so a model that holds the
        # latch can reach the ideal loss on the symbol after it.
        put(registers, LATCH_MARKER, latch_marker_base + 2 * latch, 0, 0.0, 0.0)
        put(emissions, LATCH_MARKER, latch_marker_base + 2 * latch + 1, 0, 0.0, 0.0)
        put(registers + 1, REGISTER, register_base + group[is_register], 0, ln(spec.latch_groups), ln(spec.latch_groups))
        symbol = rng.integers(0, spec.symbols_per_group, len(emissions))
        gap = np.diff(starts)[~is_register[1:]]  # emissions are never first
        put(emissions + 1, LATCH_EMISSION, emission_base + group[~is_register] * spec.symbols_per_group + symbol, gap,
            ln(spec.symbols_per_group), ln(spec.latch_groups * spec.symbols_per_group))
    _fill_background(text, rng)
    return text


def generate(spec: SyntheticSpec | RecallSpec, n_tokens: int, seed: int = 0, split: str = "train") -> SyntheticText:
    """``n_tokens`` tokens of ``spec``, a deterministic function of (spec, n_tokens, seed, split)."""
    spec.check()
    if n_tokens <= 0:
        raise TxlabError(f"synthetic corpus {spec.name!r}: number of tokens must be positive, got {n_tokens}")
    rng = np.random.default_rng([seed, _SPLIT_INDEX[split], zlib.crc32(spec.name.encode())])
    if isinstance(spec, RecallSpec):
        return _generate_recall(spec, n_tokens, rng)
    starts, distances = _place_facts(spec, n_tokens, rng)
    return build_text(spec, n_tokens, starts, distances, rng)


def write_wikitext_format(path: str | Path, n_tokens: int, spec: SyntheticSpec | None = None, seed: int = 0, words_per_line: int = 100) -> Path:
    """Write ``n_tokens`` synthetic symbols as a WikiText-style text file (space-separated words).

    Each line holds ``words_per_line`` words and ends with a newline, so a WikiText reader sees the
    same words plus one ``<eos>`` per line. Used to time the real-corpus reader on large inputs.
    """
    text = generate(spec or VARIANTS["synthetic"], n_tokens, seed)
    names = text.spec.symbols()

    def write(fh) -> None:
        step = max(1, 1_000_000 // words_per_line) * words_per_line
        for lo in range(0, n_tokens, step):
            words = [names[i] for i in text.tokens[lo : lo + step].tolist()]  # plain str: joins fast
            lines = [" ".join(words[i : i + words_per_line]) for i in range(0, len(words), words_per_line)]
            fh.write(("\n".join(lines) + "\n").encode("ascii"))

    return write_atomic(Path(path), write)
