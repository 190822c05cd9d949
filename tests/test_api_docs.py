"""The Python example in docs/api.md runs as written."""

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def test_the_api_example_runs_and_prints_its_three_results(tmp_path):
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(), flags=re.S)
    script = tmp_path / "example.py"
    script.write_text(code)
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                            env={"OMP_NUM_THREADS": "1", "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert re.fullmatch(r"valid perplexity at attention length 32: [\d.]+", lines[0])
    assert re.fullmatch(r"mean loss over 256 tokens: [\d.]+ nats", lines[1])
    assert re.fullmatch(r"\[\(0\.1, '(>= )?\d+'\), \(1\.0, '(>= )?\d+'\)\]", lines[2])
    assert (tmp_path / "runs" / "xl-tiny" / "checkpoint").is_dir() and (tmp_path / "runs" / "xl-tiny" / "losses").is_dir()
