"""The Python examples in docs/api.md run as written."""

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"


def examples() -> list[str]:
    return re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)


def run_example(code: str, cwd: Path) -> list[str]:
    script = cwd / "example.py"
    script.write_text(code)
    # PYTHONPATH: the examples run against this checkout's txlab, not another copy the interpreter has installed
    result = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, timeout=600,
                            env={"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(cwd), "HF_HUB_OFFLINE": "1"})
    assert result.returncode == 0, result.stderr
    return result.stdout.splitlines()


def test_the_own_model_own_text_example_runs_on_a_checkpoint_folder_and_a_text_file(tmp_path, hf_checkpoint):
    """The folder and the file the example names are what a researcher has: here a tiny GPT-2 with a BPE
    tokenizer trained on the text, both built offline."""
    hf_checkpoint(tmp_path / "my-checkpoint", text_file=tmp_path / "my_text.txt")
    [line] = run_example(examples()[0], tmp_path)
    assert re.fullmatch(r"\[\(0\.1, '(>= )?\d+', '(>= )?\d+'\), \(1\.0, '(>= )?\d+', '(>= )?\d+'\)\]", line)


def test_the_run_example_runs_and_prints_its_three_results(tmp_path):
    lines = run_example(examples()[1], tmp_path)
    assert re.fullmatch(r"valid perplexity at attention length 32: [\d.]+", lines[0])
    assert re.fullmatch(r"mean loss over 256 tokens: [\d.]+ nats", lines[1])
    assert re.fullmatch(r"\[\(0\.1, '(>= )?\d+'\), \(1\.0, '(>= )?\d+'\)\]", lines[2])
    assert (tmp_path / "runs" / "xl-tiny" / "checkpoint").is_dir() and (tmp_path / "runs" / "xl-tiny" / "losses").is_dir()
