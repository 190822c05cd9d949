"""The Python examples in docs/api.md run as written."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


@pytest.fixture
def run_example(monkeypatch, capsys):
    """``run(code, cwd)``: the example's lines of output, run as a script in ``cwd``. In this process, not a child
    interpreter: a fresh interpreter only adds seconds of importing torch and transformers, and the example's text
    runs the same (a namespace of its own as ``__main__``, the test's isolated txlab folders, Hugging Face offline)."""

    def run(code: str, cwd: Path) -> list[str]:
        monkeypatch.chdir(cwd)
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        capsys.readouterr()  # only the example's output
        exec(compile(code, str(cwd / "example.py"), "exec"), {"__name__": "__main__"})
        return capsys.readouterr().out.splitlines()

    return run


def test_the_own_model_own_text_example_runs_on_a_checkpoint_folder_and_a_text_file(tmp_path, hf_checkpoint, run_example):
    """The folder and the file the example names are what a researcher has: here a tiny GPT-2 with a BPE
    tokenizer trained on the text, both built offline."""
    hf_checkpoint(tmp_path / "my-checkpoint", text_file=tmp_path / "my_text.txt")
    [line] = run_example(examples()[0], tmp_path)
    recl = r"'(>= )?\d+ \[\d+, (>= )?\d+\]'"  # with its interval
    assert re.fullmatch(rf"\[\(0\.1, {recl}, {recl}\), \(1\.0, {recl}, {recl}\)\]", line)


def test_the_run_example_runs_and_prints_its_three_results(tmp_path, run_example):
    lines = run_example(examples()[1], tmp_path)
    assert re.fullmatch(r"valid perplexity at attention length 32: [\d.]+", lines[0])
    assert re.fullmatch(r"mean loss over 256 tokens: [\d.]+ nats", lines[1])
    assert re.fullmatch(r"\[\(0\.1, '(>= )?\d+'\), \(1\.0, '(>= )?\d+'\)\]", lines[2])
    assert (tmp_path / "runs" / "xl-tiny" / "checkpoint").is_dir() and (tmp_path / "runs" / "xl-tiny" / "losses").is_dir()


def test_the_words_example_scores_two_checkpoints_with_different_tokenizers_on_shared_words(tmp_path, hf_checkpoint, random_causal_lm, run_example):
    """A GPT-2 with a byte-level BPE (conftest's checkpoint) and a Llama with a SentencePiece-style (Metaspace) BPE,
    both trained on the text here, both built offline."""
    import tokenizers
    import transformers

    hf_checkpoint(tmp_path / "gpt2-bpe", text_file=tmp_path / "my_text.txt")
    tok = tokenizers.Tokenizer(tokenizers.models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Metaspace()
    tok.decoder = tokenizers.decoders.Metaspace()
    tok.train_from_iterator((tmp_path / "my_text.txt").read_text().splitlines(),
                            tokenizers.trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>"], show_progress=False))
    transformers.PreTrainedTokenizerFast(tokenizer_object=tok).save_pretrained(tmp_path / "llama-sentencepiece")
    random_causal_lm(tmp_path / "llama-sentencepiece", "llama", vocab=tok.get_vocab_size(), positions=256)
    shared, byte_ppl, recl = run_example(examples()[2], tmp_path)
    # The Metaspace BPE never saw a line end (it was trained line by line): a word after one is written with <unk>,
    # so it is left out for both models, and the blocks keep as many shared words each.
    found = re.fullmatch(r"(\d+) shared words of 160 drawn; covered per model: \{'gpt2-bpe': 160, 'llama-sentencepiece': (\d+)\}", shared)
    assert found and 0 < int(found[1]) <= int(found[2]) < 160 and int(found[1]) % 4 == 0
    assert re.fullmatch(r"per-byte perplexity at 16 words: \[[\d.]+, [\d.]+\]", byte_ppl)
    assert re.fullmatch(r"\[\('gpt2-bpe', '(>= )?\d+'\), \('llama-sentencepiece', '(>= )?\d+'\)\]", recl)
