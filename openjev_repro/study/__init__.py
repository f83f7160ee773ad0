"""The steps of one study, in the order they flow (the recipe and the run directory are in
evidence/, the orchestrator that calls these steps in orchestrator/).

    preparation.py   `invoke prepare`: downloads, checkouts, request selection, the inputs lock
    traces.py        Nsight traces of a prepared backend
    planner.py       resolves a recipe into the plan (`invoke plan`, plan.json)
    inputs.py        input verification against the recipe
    workload.py      JevBench request files, selection, HTTP bodies (build_requests)
    timed_client.py  timed HTTP/1.1 client over one raw socket
    passes.py        the pass protocol: first inference, warm-up, feasibility, measured

Each module imports only those above it in docs/design.md's layer order
(tests/test_import_graph.py holds the rule).
"""
