"""The README's two commands are the project's contract with a new user: CI runs the test command exactly as the
README writes it, so what passes in CI is what a user's fresh machine runs."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def readme_commands() -> list[str]:
    return re.findall(r"```bash\n(.+?)\n```", (ROOT / "README.md").read_text(encoding="utf-8"))


def test_ci_runs_the_readme_test_command_exactly():
    tests = [c for c in readme_commands() if c.endswith('python -m pytest -m "not unit"')]
    assert len(tests) == 1, "the README has one test command"
    assert " && python -m pytest -m unit -x -q && " in tests[0], "the unit tier runs first, stopping at a failure"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == tests[0], "the last line of .ci/run must be the README's test command, verbatim"
    assert tests[0].startswith("sh tests/install-system-packages.sh && "), "the system packages come first"


def test_the_system_packages_script_installs_the_browser_the_system_tests_drive():
    assert "chromium" in (ROOT / "tests" / "install-system-packages.sh").read_text(encoding="utf-8")


def test_the_examples_name_only_data_the_project_ships():
    naming = [p.relative_to(ROOT).as_posix() for p in (ROOT / "examples").rglob("*")
              if p.is_file() and "shared/" in p.read_text(encoding="utf-8", errors="replace")]
    assert naming == [], "an example names ../shared, which a user's clone does not have"


def test_the_demo_command_sets_up_and_runs_the_demo():
    assert any(c.startswith("python3 -m venv .venv") and c.endswith("lcrag demo") for c in readme_commands())


def test_the_team_run_file_shown_is_the_example_and_a_valid_run_file():
    import yaml

    from lcrag.pipeline.config import Config

    shown = re.search(r"`team\.yaml` \(\[examples/team\.yaml\].*?```yaml\n(.+?)\n```",
                      (ROOT / "README.md").read_text(encoding="utf-8"), re.S)
    assert shown, "the team section shows team.yaml"
    example = ROOT / "examples" / "team.yaml"
    assert yaml.safe_load(shown.group(1)) == yaml.safe_load(example.read_text(encoding="utf-8"))
    assert Config.from_file(example).settings().strategy == "self-route"  # every key valid
