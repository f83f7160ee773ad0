"""The study's orchestrator: checks before a run, then run_study() from a recipe to signed evidence.

    preflight.py   checks before a study starts (key, output folder, inputs, ports, docker)
    runner.py      run_study(): calls the steps in study/, host/, runtime/, results/, manifest/
"""
