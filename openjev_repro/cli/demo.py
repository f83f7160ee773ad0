"""The embedded demo: the whole study on a laptop CPU with the fixture model."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from invoke import task

from ..errors import RecipeError
from . import user_errors

__all__ = ["demo"]

DEMO_RECIPE = Path("recipes/demo.yaml")
DEMO_INPUTS = Path(".cache/demo")
DEMO_KEYS = Path(".cache/demo-key")


def ensure_fixture(root: Path) -> None:
    """Build the byte-stable fixture and request files once (and any request file a fixture built by an
    older version lacks); verify-inputs checks them every run."""
    from ..backend.peer_inputs import write_peer_inputs
    from ..backend.synthetic import write_request_files

    if (root / "checkpoint" / "model.json").is_file():
        write_request_files(root / "checkpoint" / "base", root / "requests", only_missing=True)
        if not (root / "peers").is_dir():  # a fixture built before the peer inputs existed
            write_peer_inputs(root)
        return
    # transformers' notice that its CUDA fast path is absent is a 265-character line, irrelevant on a CPU
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from ..backend.fixture import build_fixture

    print(f"building the fixture model in {root} (once)", file=sys.stderr)
    build_fixture(root / "checkpoint")
    write_request_files(root / "checkpoint" / "base", root / "requests")
    write_peer_inputs(root)


def recipe_with_image(image: str, dest_dir: Path = Path(".cache/demo-recipes")) -> Path:
    """A copy of the demo recipe whose backends run in `image` (e.g. openjev-repro/hf:env); the run
    records this copy, so its recipe says which image it used."""
    from ..evidence.recipe import read_yaml

    demo = read_yaml(DEMO_RECIPE, "demo recipe")
    data = {**demo, "inputs": {**demo["inputs"], "root": str(DEMO_INPUTS.resolve())},
            "backends": [{**backend, "image": image} for backend in demo["backends"]]}
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / ("demo." + "".join(ch if ch.isalnum() or ch in "-." else "_" for ch in image) + ".yaml")
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return path


@task(help={"out": "parent directory of the run directory (default: runs/)",
            "runtime": "override the backends' runtime: local (default) or docker",
            "image": "with --runtime docker: run both backends in this image instead of the recipe's "
                     "(e.g. openjev-repro/hf:env, the CUDA 13 environment)"})
@user_errors
def demo(c, out="runs", runtime=None, image=None):
    """Run the embedded demo study end to end, sign it, print the report; the last line is the run directory."""
    from ..manifest.keys import PRIVATE_KEY_NAME, PUBLIC_KEY_NAME, generate_keypair
    from ..orchestrator.preflight import RUNTIMES, check_out_dir
    from ..orchestrator.progress import ConsoleProgress
    from ..orchestrator.runner import StudyOptions, run_study
    from .output import console, print_markdown

    if runtime is not None and runtime not in RUNTIMES:
        raise RecipeError(f"--runtime {runtime!r} is not one of {', '.join(RUNTIMES)}.")
    check_out_dir(Path(out))  # before the fixture is built: a bad --out costs nothing
    ensure_fixture(DEMO_INPUTS)
    key = DEMO_KEYS / PRIVATE_KEY_NAME  # a local signing key for demo runs (never committed: .cache/ is ignored)
    if not key.is_file():
        generate_keypair(DEMO_KEYS)
    recipe = recipe_with_image(image) if image else DEMO_RECIPE
    run = run_study(StudyOptions(recipe_path=recipe, out_dir=Path(out), runtime=runtime, key_path=key,
                                 progress=ConsoleProgress(console(stderr=True))))
    print_markdown((run.path / "report.md").read_text(encoding="utf-8"))
    # one line whatever the terminal's width, so the command can be copied
    sys.stdout.write(f"\nverify with: .venv/bin/invoke verify --run {run.path} --pubkey {DEMO_KEYS / PUBLIC_KEY_NAME}\n")
    sys.stdout.write(f"{run.path}\n")  # never wrapped: scripts take the last line as the run directory
