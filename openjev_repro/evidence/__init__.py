"""What a run is: the files a study writes and every reader reads, directly above the foundations.

    recipe.py    the recipe schema, its YAML loading (aliases refused) and parse_duration
    rows.py      the row record (rows.jsonl), its writer and reader
    summary.py   summary.json's shape as TypedDicts, and read_summary
    files.py     the one atomic writer (files and directories), JSON and JSONL readers, format check
    rundir.py    the run directory: layout, state file, entry walk, output guard
    plan.py      plan.json's record (`Plan`), what `resolve_plan` returns and `invoke plan` prints
    state.py     state.json's record (`StateRecord`) and `Status`
    records.py   the records of host, environment, backends and import JSON files (StateRecord re-exported)
    statement.py the signed statement's record and its one shape check (`Statement.parse`)
    tolerances.py the tolerances file's record (`Tolerances.parse`, `limits_for`)

Every other package may import this one; it imports only the foundations
(tests/test_import_graph.py holds the rule).
"""
