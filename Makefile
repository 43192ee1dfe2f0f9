# Development entry points. `make report` and `make test` do all the set-up themselves on a
# fresh machine: they create .venv, install fi-compat with FlashInfer and the test tools
# (pins in constraints/dev.txt), then run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup report test lint bench clean

$(STAMP): pyproject.toml constraints/dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-c constraints/dev.txt -e '.[flashinfer,test]'
	touch $(STAMP)

setup: $(STAMP)

report: $(STAMP)
	$(BIN)/fi-compat report

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m mypy

test: lint
	$(BIN)/python -m pytest

bench: $(STAMP)
	for script in bench/*.py; do $(BIN)/python $$script || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
