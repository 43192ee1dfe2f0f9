# Development entry points. `make report` and `make test` do all the set-up themselves on a
# fresh machine: they create .venv, install fi-compat with FlashInfer, the test tools and the
# maintainer tooling's dependencies (pins in constraints/dev.txt), then run.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup report test lint bench clean record record-all compare-griffe

$(STAMP): pyproject.toml constraints/dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check \
		-c constraints/dev.txt -e '.[flashinfer,test,tools]'
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

# Maintainer tooling (tools/, not in the wheel). Releases are downloaded once into
# ~/.cache/fi-compat/releases (set FI_COMPAT_RELEASE_CACHE to move it).
# `make record V=0.7.3` (re)records one release into fi_compat/testing/signatures/.
record: $(STAMP)
	@test -n "$(V)" || { echo "usage: make record V=<flashinfer-python version>" >&2; exit 2; }
	$(BIN)/python -m tools.record $(V)

# Re-records every release in fi_compat/testing/signatures/releases.txt.
record-all: $(STAMP)
	$(BIN)/python -m tools.record --all

# Prints how griffe's reading of every recorded release compares with the recorded JSON.
compare-griffe: $(STAMP)
	$(BIN)/python -m tools.compare_griffe

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache .hypothesis build *.egg-info
