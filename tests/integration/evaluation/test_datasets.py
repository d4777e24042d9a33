import json
import subprocess
import sys


def write_jsonl(path, records):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


# -- defect 4: unreadable files and badly typed records are one DatasetError naming file:line -------------------------
PNG = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"


def test_cli_eval_reports_a_bad_dataset_in_one_line(tmp_path):
    (tmp_path / "image.jsonl").write_bytes(PNG)
    result = subprocess.run([sys.executable, "-m", "lcrag.cli", "eval", "--dataset", str(tmp_path / "image.jsonl"),
                             "--out", str(tmp_path / "run"), "--llm", "openai:m@http://127.0.0.1:9/v1"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"lcrag: error: {tmp_path / 'image.jsonl'}:1: not UTF-8 text (byte 0x89 at column 1; binary data, or "
        f"Latin-1/cp1252 text?); save it as UTF-8"]


# -- defect 16: ∞Bench PassKey as the official data and scorer have it ------------------------------------------------


# -- defect 17: all 21 LongBench tasks, official prompt, length, metric; unknown task refused -------------------------


# -- defect 20: ids unique within a run -------------------------------------------------------------------------------


# -- defect 24: one string is one answer ------------------------------------------------------------------------------
