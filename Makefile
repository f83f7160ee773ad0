# Two commands set everything up on a fresh machine: `make demo` and `make test`.
# Both create .venv (if absent) and install the package with its extras there.

PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test venv clean-runs

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

clean-runs:
	rm -rf runs/
