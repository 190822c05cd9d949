"""No code from any file txlab reads, no silent fallback, and the Python API's checks (issue 50).

A checkpoint or tokenizer folder whose config names its own Python (``auto_map``) is refused in one line, with
``y`` on stdin (what transformers would take as consent), and the folder's code never runs: its module writes a
marker file when imported, which must never appear. A tokenizer that is there but does not load is an error
naming its file, never a silent fallback to characters."""

import io
import json
from pathlib import Path

import numpy as np
import pytest

import txlab
from txlab.data import hf_folders
from txlab.errors import TxlabError

pytest.importorskip("transformers")

CONSENT = "y\ny\ny\n"
"""What a user (or a pipe) might answer transformers' 'Do you wish to run the custom code? [y/N]'."""


def plant_code(folder: Path, file: str, auto_map: dict, module: str, body: str, **fields) -> Path:
    """Give ``folder`` a module that writes ``folder``/MARKER when imported and name it in ``file``'s auto_map."""
    config = json.loads((folder / file).read_text()) if (folder / file).is_file() else {}
    (folder / file).write_text(json.dumps({**config, **fields, "auto_map": auto_map}))
    (folder / f"{module}.py").write_text(f"open({str(folder / 'MARKER')!r}, 'w').write('ran')\n{body}")
    return folder


def custom_model(folder: Path, random_causal_lm, model_type: str = "txlab-custom") -> Path:
    """A tiny GPT-2 checkpoint whose config.json asks for its own config and model classes."""
    random_causal_lm(folder, "gpt2")
    body = ("from transformers import GPT2Config, GPT2LMHeadModel\n"
            f"class CustomConfig(GPT2Config):\n    model_type = {model_type!r}\n"
            "class CustomModel(GPT2LMHeadModel):\n    config_class = CustomConfig\n")
    return plant_code(folder, "config.json", {"AutoConfig": "custom.CustomConfig", "AutoModelForCausalLM": "custom.CustomModel"},
                      "custom", body, model_type=model_type)


def custom_tokenizer(folder: Path, hf_checkpoint) -> Path:
    """A checkpoint whose tokenizer_config.json asks for its own tokenizer class."""
    hf_checkpoint(folder)
    body = "from transformers import PreTrainedTokenizerFast\nclass CustomTokenizer(PreTrainedTokenizerFast):\n    pass\n"
    return plant_code(folder, "tokenizer_config.json", {"AutoTokenizer": [None, "custom_tok.CustomTokenizer"]}, "custom_tok", body,
                      tokenizer_class="CustomTokenizer")


def one_error(result) -> str:
    """The command's one `error:` line (exit 2, no traceback)."""
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    return errors[0]


@pytest.fixture
def text_file(tmp_path) -> Path:
    words = "the king of a land and his people saw it".split()
    path = tmp_path / "my.txt"
    path.write_text("".join(" ".join(words[(i + j) % len(words)] for j in range(3 + i % 7)) + "\n" for i in range(120)))
    return path


COMMANDS = {
    "eval": lambda ck, text: ["eval", f"hf:{ck}", "--text", text, "--max-tokens", 20],
    "eval-char": lambda ck, text: ["eval", f"hf:{ck}", "--text", text, "--tokenizer", "char", "--max-tokens", 20],
    "generate": lambda ck, text: ["generate", f"hf:{ck}", "--prompt", "the king", "--tokens", 3],
    "recl": lambda ck, text: ["recl", "--group", f"hf:{ck}", "--text", text, "--dry-run"],
    "recl-char": lambda ck, text: ["recl", "--group", f"hf:{ck}", "--text", text, "--tokenizer", "char", "--dry-run"],
}


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("model_type", ["txlab-custom", "gpt2"])
def test_a_checkpoint_with_its_own_code_is_refused_and_its_code_never_runs(tmp_path, random_causal_lm, cli, text_file, command, model_type):
    """Whatever stdin holds; also when the model type is built in (transformers would quietly build its own class)."""
    ck = custom_model(tmp_path / "ck", random_causal_lm, model_type)
    line = one_error(cli("--home", tmp_path / "home", *COMMANDS[command](ck, text_file), input=CONSENT))
    assert "asks to run its own Python code" in line and "config.json" in line and "custom.CustomModel" in line
    assert not (ck / "MARKER").exists()


def test_load_model_refuses_a_checkpoint_with_its_own_code(tmp_path, random_causal_lm, monkeypatch):
    ck = custom_model(tmp_path / "ck", random_causal_lm)
    monkeypatch.setattr("sys.stdin", io.StringIO(CONSENT))
    with pytest.raises(TxlabError, match="asks to run its own Python code"):
        txlab.load_model(f"hf:{ck}")
    assert not (ck / "MARKER").exists()


@pytest.mark.parametrize("model_type", ["txlab-custom", "gpt2"])
def test_transformers_itself_is_told_never_to_trust_a_folders_code(tmp_path, random_causal_lm, monkeypatch, model_type):
    """What a Hub repository meets (its files are not read before transformers fetches them): with txlab's own
    check of the folder off, transformers refuses the code (trust_remote_code=False), or builds its own class and
    the loaded config's auto_map is refused; the code never runs."""
    ck = custom_model(tmp_path / "ck", random_causal_lm, model_type)
    monkeypatch.setattr(hf_folders, "refuse_custom_code", lambda source: None)
    monkeypatch.setattr("sys.stdin", io.StringIO(CONSENT))
    with pytest.raises(TxlabError, match="asks to run its own Python code"):
        txlab.load_model(f"hf:{ck}")
    assert not (ck / "MARKER").exists()


def test_a_tokenizer_with_its_own_code_is_refused_and_its_code_never_runs(tmp_path, random_causal_lm, hf_checkpoint, cli, text_file, monkeypatch):
    tok = custom_tokenizer(tmp_path / "tok", hf_checkpoint)
    model = random_causal_lm(tmp_path / "plain", "gpt2", vocab=300, positions=64)
    for args in (["eval", f"hf:{model}", "--text", text_file, "--tokenizer", f"hf:{tok}", "--max-tokens", 20],
                 ["recl", "--group", f"hf:{model}", "--text", text_file, "--tokenizer", f"hf:{tok}", "--dry-run"],
                 ["data", "info", "--text", text_file, "--tokenizer", f"hf:{tok}"],
                 ["eval", f"hf:{tok}", "--text", text_file, "--max-tokens", 20]):  # the checkpoint's own tokenizer
        line = one_error(cli("--home", tmp_path / "home", *args, input=CONSENT))
        assert "asks to run its own Python code" in line and "tokenizer_config.json" in line, args
    with pytest.raises(TxlabError, match="asks to run its own Python code"):
        txlab.encode_text("the king of", f"hf:{tok}")
    # transformers is told not to trust it either
    monkeypatch.setattr("txlab.data.tokenizers.refuse_custom_code", lambda source: None)
    monkeypatch.setattr(hf_folders, "refuse_custom_code", lambda source: None)
    monkeypatch.setattr("sys.stdin", io.StringIO(CONSENT))
    with pytest.raises(TxlabError, match="asks to run its own Python code"):
        txlab.encode_text("the king of", f"hf:{tok}")
    assert not (tok / "MARKER").exists()


# --- no silent fallback -------------------------------------------------------------------------------


@pytest.mark.parametrize("damage", ["truncated", "not a tokenizer"])
def test_a_checkpoints_tokenizer_that_does_not_load_is_an_error_naming_it(tmp_path, hf_checkpoint, cli, text_file, damage):
    """It used to be scored by characters with exit 0."""
    ck = hf_checkpoint(tmp_path / "ck")
    tokenizer = ck / "tokenizer.json"
    tokenizer.write_bytes(tokenizer.read_bytes()[:2000] if damage == "truncated" else b'{"version": "1.0"}')
    expected = "tokenizer.json is damaged" if damage == "truncated" else "tokenizer.json, tokenizer_config.json) does not load"
    for args in (["eval", f"hf:{ck}", "--text", text_file, "--max-tokens", 20],
                 ["recl", "--group", f"hf:{ck}", "--text", text_file, "--dry-run"],
                 ["generate", f"hf:{ck}", "--prompt", "the king", "--tokens", 3]):
        line = one_error(cli("--home", tmp_path / "home", *args))
        assert expected in line and str(ck) in line, (args, line)
    with pytest.raises(TxlabError, match="tokenizer.json"):
        txlab.encode_text(text_file, txlab.load_model(f"hf:{ck}"))


def test_a_damaged_config_json_is_named(tmp_path, random_causal_lm, cli, text_file):
    ck = random_causal_lm(tmp_path / "ck", "gpt2")
    (ck / "config.json").write_text('{"model_type": "gpt2", ')
    line = one_error(cli("--home", tmp_path / "home", "recl", "--group", f"hf:{ck}", "--text", text_file, "--tokenizer", "char", "--dry-run"))
    assert f"{ck / 'config.json'} is damaged" in line


def test_a_checkpoint_without_tokenizer_files_still_reads_characters(tmp_path, random_causal_lm, cli, text_file):
    """No tokenizer at all is not damage: own text is read by characters, as the help says."""
    ck = random_causal_lm(tmp_path / "ck", "gpt2", vocab=300, positions=64)
    plan = cli.ok("--home", tmp_path / "home", "recl", "--group", f"hf:{ck}", "--text", text_file, "--set", "grid=4,8",
                  "--set", "blocks=1", "--set", "block_len=20", "--dry-run").output
    assert "tokenizer char" in plan


# --- the Python API -------------------------------------------------------------------------------------


@pytest.mark.parametrize("grid", [[0, 8], [16, 8], [-4, 8], [8, 8], [8]])
def test_context_losses_refuses_the_grids_the_cli_refuses(tmp_path, random_causal_lm, grid):
    model = txlab.load_model(f"hf:{random_causal_lm(tmp_path / 'g', 'gpt2')}")
    with pytest.raises(TxlabError, match="at least two strictly ascending positive lengths"):
        txlab.context_losses(model, np.arange(200) % 41, grid, n_blocks=1, block_len=10)


def test_encode_text_reads_a_file_or_the_text_by_one_rule(tmp_path, hf_checkpoint, text_file, monkeypatch):
    model = txlab.load_model(f"hf:{hf_checkpoint(tmp_path / 'ck')}")
    whole = txlab.encode_text(text_file, model)
    assert np.array_equal(txlab.encode_text(str(text_file), model), whole)  # a string naming an existing file is that file
    monkeypatch.chdir(tmp_path)
    assert np.array_equal(txlab.encode_text("my.txt", model), whole)
    for missing in ("no-such-file.txt", "texts/my.txt", Path("nothing"), str(tmp_path / "gone.md")):
        with pytest.raises(TxlabError, match="no file"):
            txlab.encode_text(missing, model)
    text = "the king of the"
    assert np.array_equal(txlab.encode_text(text, model), model_tokens(model, text))  # the text itself, as the CLI encodes it
    assert len(txlab.encode_text("the", model)) >= 1  # one word without a suffix is text
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    with pytest.raises(TxlabError, match="not UTF-8 text"):
        txlab.encode_text(tmp_path / "binary.bin", model)


def test_encode_text_gives_the_split_the_commands_score(tmp_path, hf_checkpoint, text_file, cli):
    """Default valid, the token split `txlab recl --text` reads; `txlab eval --text` scores that split's characters cut at
    word starts, as perplexity(text=...) does (the same tokens, the same loss); split=None is the whole file; char and
    word, which the package docstring offers, count their vocabulary from the whole text as the commands do."""
    model = txlab.load_model(f"hf:{hf_checkpoint(tmp_path / 'ck')}")
    valid, whole = txlab.encode_text(text_file, model), txlab.encode_text(text_file, model, split=None)
    test = txlab.encode_text(text_file, model, split="test")
    assert len(whole) == len(txlab.encode_text(text_file.read_text(), model)) and np.array_equal(whole[-len(test) - len(valid):-len(test)], valid)
    scored = cli.json("--home", tmp_path / "home", "eval", f"hf:{tmp_path / 'ck'}", "--text", text_file, "--tgt-len", 64, "--json", "-q")
    by_text = txlab.perplexity(model, text=text_file, segment=64)
    assert by_text["tokens"] == scored["tokens"] and by_text["loss"] == pytest.approx(scored["loss"], abs=1e-5)
    assert abs(len(valid) - 1 - scored["tokens"]) < 0.05 * len(valid)  # the token cut and the character cut nearly agree
    chars = txlab.encode_text(text_file, "char", split=None)
    assert len(chars) == len(text_file.read_text()) and chars.max() < len(set(text_file.read_text()))
    assert len(txlab.encode_text(text_file, "word", split=None)) == len(text_file.read_text().split()) + text_file.read_text().count("\n")
    with pytest.raises(TxlabError, match="counts its vocabulary from a text file"):
        txlab.encode_text("the king", "char")


def model_tokens(model, text: str) -> np.ndarray:
    from txlab.data.tokenizers import load_hf_tokenizer

    return np.asarray(load_hf_tokenizer(model.tokenizer.source).encode(text))


def test_a_tokenizer_config_naming_code_beside_a_built_in_class_is_refused_after_reading(tmp_path, hf_checkpoint, monkeypatch):
    """What a Hub tokenizer meets: transformers builds its own class, and the loaded auto_map is refused."""
    folder = hf_checkpoint(tmp_path / "ck")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "auto_map": {"AutoTokenizer": [None, "custom_tok.CustomTokenizer"]}}))
    monkeypatch.setattr("txlab.data.tokenizers.refuse_custom_code", lambda source: None)
    monkeypatch.setattr(hf_folders, "refuse_custom_code", lambda source: None)
    with pytest.raises(TxlabError, match="asks to run its own Python code"):
        txlab.encode_text("the king of", f"hf:{folder}")


class _Planted:
    """A pickled object whose loading would write a marker file (torch.load(weights_only=True) must refuse it)."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


def _pickled_weights(folder: Path) -> None:
    import torch
    from safetensors.torch import load_file

    weights = load_file(folder / "model.safetensors")
    (folder / "model.safetensors").unlink()
    torch.save({**weights, "planted": _Planted(folder / "MARKER")}, folder / "pytorch_model.bin")


def _truncated_weights(folder: Path) -> None:
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])


def _wider_config(folder: Path) -> None:
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "n_embd": 32}))


@pytest.mark.parametrize(("damage", "expected"), [(_pickled_weights, "a pickle that would run code"), (_truncated_weights, "are damaged"),
                                                  (_wider_config, "do not fit its config.json")], ids=["pickled", "truncated", "shapes"])
def test_weights_that_do_not_load_are_one_line(tmp_path, random_causal_lm, cli, text_file, damage, expected):
    ck = random_causal_lm(tmp_path / "ck", "gpt2")
    damage(ck)
    line = one_error(cli("--home", tmp_path / "home", "eval", f"hf:{ck}", "--text", text_file, "--tokenizer", "char", "--max-tokens", 20))
    assert expected in line and str(ck) in line
    assert not (ck / "MARKER").exists()


def test_the_one_loader_takes_no_other_trust_than_false():
    from txlab.data import hf_folders

    for load in (hf_folders.from_pretrained, hf_folders.from_config):
        with pytest.raises(ValueError, match="never runs a checkpoint's own code"):
            load(object, "x", trust_remote_code=True)
