# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Both create .venv (if absent) and install the package with its extras there.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-fast venv clean-runs

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[backend,dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/invoke demo

test: $(STAMP)
	$(BIN)/python -m pytest -q -ra -n 3 --dist loadfile

# The edit-test loop: every test that starts no process, runs no study and loads no model
# (tests/tiers.py marks the others `slow` by rule). One process: on 2 busy cores that beats two workers,
# which each collect the suite again.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "not slow"

clean-runs:
	rm -rf runs/
