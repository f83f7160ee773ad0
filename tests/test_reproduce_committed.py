"""`invoke reproduce` on the committed evidence (issue 38): the real signed runs under results/.

- the reference study's run against its fresh-host rerun: REPRODUCED (exit 0);
- the fast study's run against its fresh-host rerun: REPRODUCED, the differing autotune choices listed as a
  possible explanation;
- the reference run against the fast run (another study): NOT COMPARABLE naming the fields (exit 4);
- a copy of the rerun with another weights fingerprint, or another GPU model, re-signed with a new key:
  NOT COMPARABLE naming it;
- a run checked with the wrong key: one error line, exit 1, no verdict;
- every committed recipe declares `reproduction:`, and its margins, applied to its own committed run and
  rerun, say REPRODUCED (so each number rests on what was measured).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from invoking import invoke

from openjev_repro.audit.reproduce import MarginSource, RunUnderTest, judge
from openjev_repro.evidence.recipe import load_recipe
from openjev_repro.manifest import generate_keypair, write_manifest

REPO = Path(__file__).resolve().parents[1]
REFERENCE = REPO / "results" / "h200-reference-27b-shape"
FAST = REPO / "results" / "h200-fast-27b-shape"


def _flat(lines: list[str]) -> str:
    """The verdict's text with its 80-column wrapping undone (continuation lines joined by one space)."""
    return " ".join(line.strip() for line in lines)


def _reproduce(*args: str) -> tuple[int, list[str], str]:
    proc = invoke("reproduce", *args, env={"COLUMNS": "200"})
    return proc.returncode, proc.stdout.splitlines(), proc.stderr


def test_reference_run_against_its_rerun_is_reproduced():
    code, lines, err = _reproduce("--original", str(REFERENCE / "run"), "--rerun", str(REFERENCE / "rerun"),
                                  "--pubkey", str(REFERENCE / "signing-key.pub"))
    assert code == 0, err
    assert lines[0] == "Verdict: REPRODUCED"
    text = "\n".join(lines)
    assert "margins: documented defaults (the original declares none)" in text
    for backend in ("reference-raw", "reference-fast", "reference-fast-graph64"):
        assert f"mixed/{backend}" in text
    assert "NOT REPRODUCED" not in text and "INCONCLUSIVE" not in text
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)


def test_fast_run_against_its_fresh_host_rerun_is_reproduced_naming_autotune():
    code, lines, err = _reproduce("--original", str(FAST / "run-2026-12-02d"), "--rerun", str(FAST / "rerun-2026-12-02d"),
                                  "--pubkey", str(FAST / "signing-key-2026-12-02d.pub"))
    assert code == 0, err
    assert lines[0] == "Verdict: REPRODUCED"
    text = _flat(lines)
    explained = text.split("Possible explanations (should match, differ):")[1].split("Equivalence")[0]
    assert "autotune (reference-fast-best)" in explained
    assert "max |dp| 0.007790 (margin 0.0204): REPRODUCED" in text  # the compiled best backend's drift


def test_reference_run_against_the_fast_run_is_not_comparable():
    code, lines, _ = _reproduce("--original", str(REFERENCE / "run"), "--rerun", str(FAST / "run"),
                                "--pubkey", str(FAST / "signing-key.pub"),
                                "--original-pubkey", str(REFERENCE / "signing-key.pub"))
    assert code == 4
    assert lines[0] == "Verdict: NOT COMPARABLE"
    text = _flat(lines)
    assert "backends: reference-fast, reference-fast-graph64, reference-raw vs reference-fast-best," in text
    assert "requests: mixed 7a69141861bc vs mixed c12257aaae2b" in text
    assert "Equivalence" not in text  # nothing is judged across studies


def test_the_verdict_is_the_same_every_time():
    args = ("--original", str(REFERENCE / "run"), "--rerun", str(REFERENCE / "rerun"),
            "--pubkey", str(REFERENCE / "signing-key.pub"))
    assert _reproduce(*args)[1] == _reproduce(*args)[1]


def test_a_run_that_does_not_verify_gets_no_verdict():
    code, lines, err = _reproduce("--original", str(REFERENCE / "run"), "--rerun", str(FAST / "rerun-2026-12-02d"),
                                  "--pubkey", str(REFERENCE / "signing-key.pub"))
    assert code == 1 and lines == []
    assert err.count("error:") == 1 and "does not verify" in err and "no verdict" in err


def _resigned_copy(tmp_path: Path, edit) -> tuple[Path, Path]:
    """The committed reference rerun copied, edited by `edit`, and signed again with a new key."""
    copy = tmp_path / "rerun"
    shutil.copytree(REFERENCE / "rerun", copy)
    edit(copy)
    (copy / "manifest.dsse.json").unlink()
    private, public, _ = generate_keypair(tmp_path / "keys")
    write_manifest(copy, key_path=private)
    return copy, public


def _edit_json(path: Path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def test_another_weights_fingerprint_is_not_comparable(tmp_path):
    def other_weights(run: Path) -> None:
        _edit_json(run / "backends.json", lambda d: d["backends"]["reference-fast"].update(
            weights_fingerprint="wfp1:" + "ab" * 32))

    rerun, public = _resigned_copy(tmp_path, other_weights)
    code, lines, err = _reproduce("--original", str(REFERENCE / "run"), "--rerun", str(rerun), "--pubkey", str(public),
                                  "--original-pubkey", str(REFERENCE / "signing-key.pub"))
    assert code == 4, err
    assert lines[0] == "Verdict: NOT COMPARABLE"
    text = _flat(lines)
    assert ("weights_fingerprint (reference-fast): wfp1:b12264051e06547823a06c991a853da6f12140f2158a57f1780baca524accbc0"
            " vs wfp1:" + "ab" * 32) in text


def test_another_gpu_model_is_not_comparable(tmp_path):
    def other_gpu(run: Path) -> None:
        _edit_json(run / "environment.json", lambda d: d["gpus"]["devices"][0].update(name="NVIDIA H100 80GB HBM3"))
        _edit_json(run / "host.json", lambda d: d["device"].update(name="NVIDIA H100 80GB HBM3"))

    rerun, public = _resigned_copy(tmp_path, other_gpu)
    code, lines, _ = _reproduce("--original", str(REFERENCE / "run"), "--rerun", str(rerun), "--pubkey", str(public),
                                "--original-pubkey", str(REFERENCE / "signing-key.pub"))
    assert code == 4
    assert "gpu_model: NVIDIA H200 vs NVIDIA H100 80GB HBM3" in _flat(lines)


COMMITTED_PAIRS = [("h200-reference-27b-shape.yaml", REFERENCE, "run", "rerun", "signing-key.pub"),
                   ("h200-fast-27b-shape.yaml", FAST, "run-2026-12-02d", "rerun-2026-12-02d", "signing-key-2026-12-02d.pub")]


@pytest.mark.parametrize(("recipe", "results", "run", "rerun", "key"), COMMITTED_PAIRS)
def test_each_recipe_margins_reproduce_its_committed_rerun(recipe, results, run, rerun, key):
    """The margins a recipe declares today hold for the run and rerun it produced (the numbers rest on them; the fast
    recipe's pinned study has no complete rerun yet, so its pair is the 2026-12-02 one)."""
    declared = load_recipe(REPO / "recipes" / recipe).reproduction
    assert declared is not None
    original = RunUnderTest.read(results / run, results / run)
    again = RunUnderTest.read(results / rerun, results / rerun)
    verdict = judge(original, again, original_pubkey=results / key,
                    policy=(declared, MarginSource.RECIPE))
    assert verdict.kind.value == "REPRODUCED", [(r.backend, [(j.metric, j.outcome) for j in r.latency])
                                                for r in verdict.results]


def test_every_committed_recipe_declares_reproduction_margins_with_their_basis():
    for path in sorted((REPO / "recipes").glob("*.yaml")):
        reproduction = load_recipe(path).reproduction
        assert reproduction is not None, path.name
        assert len(reproduction.basis) > 40, path.name


def test_an_imported_published_run_is_checked_by_its_digests_and_judged(tmp_path):
    """An import (a published timings-csv layout, tests/published_layouts.py) is never signed: it is verified
    against its published digests, whatever --pubkey says, and judged by the documented defaults."""
    from published_layouts import timings_csv

    run = tmp_path / "imported"
    assert invoke("import-evidence", "--src", str(timings_csv(tmp_path / "src")), "--out", str(run)).returncode == 0
    code, lines, err = _reproduce("--original", str(run), "--rerun", str(run), "--pubkey",
                                  str(REFERENCE / "signing-key.pub"))
    text = _flat(lines)
    assert code == 5, err  # 10 requests per run: no P95 bounds
    assert "no manifest (imported)" in text and "margins: documented defaults" in text
    assert "max |dp|: no paired case has a probability in both runs, not judged" in text
    assert "INCONCLUSIVE: needs >= 59 requests per run for its bounds, has 10" in text
    assert "NOT REPRODUCED" not in text


def _examples() -> list[tuple[list[str], list[str]]]:
    """(argv after `invoke`, the lines shown) of every `$ invoke reproduce` block of docs/reproduce.md."""
    import shlex

    found, text = [], (REPO / "docs" / "reproduce.md").read_text().split("```")
    for block in text[1::2]:
        lines = block.strip("\n").splitlines()
        if not lines or not lines[0].startswith("$ invoke reproduce"):
            continue
        command = []
        while lines and (not command or command[-1].endswith("\\")):
            command.append(lines.pop(0))
        argv = shlex.split(" ".join(c.rstrip("\\") for c in command).removeprefix("$ invoke "))
        found.append((argv, [line for line in lines if line != "..."]))
    return found


def test_the_worked_examples_are_what_the_command_prints():
    examples = _examples()
    assert len(examples) == 3
    for argv, shown in examples:
        printed = invoke(*argv, cwd=REPO).stdout.splitlines()
        at = 0
        for line in shown:  # each shown line, in order, among the printed ones
            assert line in printed[at:], (argv, line)
            at = printed.index(line, at) + 1
