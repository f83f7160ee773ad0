"""What a run's rows say: statistics, the imported study's figure lines, the report.

    row_table.py    rows parsed once into numpy columns (what summarize, verify, compare and report read)
    statistics.py   statistics, correctness, agreement, gates: pure functions of rows (summary.json)
    imported.py     an imported study's published figures and cleanup as report lines
    report.py       report.md and its plots
"""
