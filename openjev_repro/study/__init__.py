"""A study, in the order it flows: from a recipe to a run directory of evidence.

    recipe.py        the recipe schema, loading, validation (file:line: field.path: message)
    preparation.py   `invoke prepare`: downloads, checkouts, request selection, the inputs lock
    traces.py        Nsight traces of a prepared backend
    plan.py          the resolved plan (`invoke plan`, plan.json)
    inputs.py        input verification against the recipe
    workload.py      JevBench request files, selection, HTTP bodies (build_requests)
    synthetic.py     synthetic JevBench-format request files (fixture tokenizer, exact lengths)
    timed_client.py  timed HTTP/1.1 client over one raw socket
    rows.py          per-request rows, the source of truth (rows.jsonl)
    passes.py        the pass protocol: first inference, warm-up, feasibility, measured
    rundir.py        the run directory: layout, state file, atomic writes, entry walk, output guard
    preflight.py     checks before a study starts (key, output folder, inputs, ports, docker)
    runner.py        the orchestrator: run_study(), from recipe to signed evidence

Each module imports only those above it in docs/design.md's layer order
(tests/test_import_graph.py holds the rule).
"""
