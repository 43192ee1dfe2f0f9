# Development entry points. `make report` and `make test` do all the set-up themselves on a
# fresh machine: they create .venv, install fi-compat with FlashInfer, the test tools and the
# maintainer tooling's dependencies (pins in constraints/dev.txt), then run.
PYTHON ?= python3
VENV := .venv
# Every process of a run writes the bytecode of what it imports (into the venvs, the
# checkout's __pycache__ and the release cache), whatever the caller's environment says: with
# PYTHONDONTWRITEBYTECODE set, each of the suite's Python processes compiled from source
# every module it imported (torch, FlashInfer and numpy alone are 1,952 modules, 49 MB of
# Python, about 12 s of one core), and pytest rewrote the test modules afresh in every worker.
# uv, which fills the venvs, leaves compiling to the first import where pip compiled all at
# install (all of .venv: 14,000 modules, 48 s of two cores; a run imports a seventh of them).
unexport PYTHONDONTWRITEBYTECODE
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
VENV310 := .venv310
STAMP310 := $(VENV310)/.installed

.PHONY: setup report test test-fast test-all test-under-load test-suite test-py310 lint bench clean record add-release \
	record-all compare-griffe measure-reach measure-layers measure-sizes release-check dist docs \
	screenshots

# pytest-xdist workers for the test runs (both cores of the project's machines). The runs
# distribute whole test files (--dist loadfile): a module-scoped fixture that measures,
# builds or scans something costly (the release measurements, the distributions, the engine
# scans) is then made once, not once on each worker that gets some of the module's tests.
# (--dist loadgroup would be finer, but pytest-xdist 3.8 does not group under pytest 9.)
WORKERS ?= 2
# Extra pytest arguments for every run of the suite (`make test-all` adds --all-releases).
PYTEST_ARGS ?=

# Both venvs are filled by uv (pinned in constraints/dev.txt, bootstrapped with the venv's own
# pip): it takes the same pins and the same files as pip, torch's CPU build from the machine's
# find-links directory included (pip's PIP_FIND_LINKS, else /opt/wheels where it exists, given
# to uv as UV_FIND_LINKS, which the release check's fresh venv uses too), and installs from its
# cache ($XDG_CACHE_HOME/uv) in seconds where pip took a minute and a half for the two venvs.
# pip is still upgraded in both: the suite's downloads go through it.
FIND_LINKS ?= $(or $(PIP_FIND_LINKS),$(wildcard /opt/wheels))
ifneq ($(FIND_LINKS),)
export UV_FIND_LINKS ?= $(FIND_LINKS)
endif
UV_INSTALL = pip install --quiet --upgrade-package pip -c constraints/dev.txt
UV_BOOTSTRAP = -m pip install --quiet --disable-pip-version-check -c constraints/dev.txt uv

$(STAMP): pyproject.toml constraints/dev.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python $(UV_BOOTSTRAP)
	$(BIN)/uv $(UV_INSTALL) --python $(BIN)/python pip -e '.[flashinfer,test,tools,release,docs]'
	touch $(STAMP)

setup: $(STAMP)

report: $(STAMP)
	$(BIN)/fi-compat report

# mypy keeps its incremental cache outside the checkout, shared by every clone on the machine
# (it checks each module's source hash before reusing an entry, so a clone with other files
# is checked afresh where they differ): a fresh clone's lint then checks only what changed.
MYPY_CACHE ?= $${XDG_CACHE_HOME:-$$HOME/.cache}/fi-compat/mypy

lint: $(STAMP)
	$(BIN)/python -m ruff check .
	$(BIN)/python -m ruff format --check .
	$(BIN)/python -m mypy --cache-dir "$(MYPY_CACHE)"

# The one command CI and the README name. Each stage prints its wall time, and a table of all
# of them closes the run (scripts/stage.sh): the set-up of both venvs (side by side), lint
# beside the docs build (each keeps one core busy; the docs' output follows lint's), then
# the Python 3.10 run beside the whole suite on Python 3.11 under branch coverage of
# fi_compat (release check included), reported with the missing lines and
# failing under the floor ([tool.coverage] in pyproject.toml). The two test runs share the
# cores, so each fills the time the other waits (on a subprocess, a download, the last test
# file, the coverage report); the Python 3.10 run's output follows the suite's. Both runs
# end with their skips by reason and fail on one the suite could remove (--strict-skips,
# tests/support/skips.py). Release-parametrized tests run the first and last release of
# each release class (tests/support/release_classes.py); `make test-all` runs every one.
test:
	@rm -f .stages
	@sh scripts/stage.sh setup $(MAKE) --no-print-directory -j2 $(STAMP) $(STAMP310)
	@STAGE_SUMMARY=end sh scripts/stage.sh docs $(MAKE) --no-print-directory docs \
		>.docs.log 2>&1 & docs=$$!; \
	STAGE_SUMMARY=end sh scripts/stage.sh lint $(MAKE) --no-print-directory lint; \
	lint=$$?; wait $$docs; docs=$$?; cat .docs.log; rm -f .docs.log; \
	test $$lint -eq 0 && test $$docs -eq 0 || { sh scripts/stage.sh --summary; exit 1; }
	@STAGE_SUMMARY=end sh scripts/stage.sh py310 $(MAKE) --no-print-directory test-py310 \
		>.py310.log 2>&1 & py310=$$!; \
	STAGE_SUMMARY=end sh scripts/stage.sh suite $(MAKE) --no-print-directory test-suite; \
	suite=$$?; wait $$py310; py310=$$?; \
	echo; cat .py310.log; rm -f .py310.log; \
	sh scripts/stage.sh --summary; \
	test $$suite -eq 0 && test $$py310 -eq 0

# `make test` as CI runs it on a busy machine with nothing cached: a fresh clone of HEAD, every
# cache empty, one busy process per core at nice 0 beside it (scripts/under_load.sh; HOGS=0
# for the idle cold run). Prints the stage table and the coverage total.
test-under-load:
	sh scripts/under_load.sh

# `make test` with the full release sweep: every release-parametrized test on every release.
test-all:
	@$(MAKE) --no-print-directory test PYTEST_ARGS="--all-releases $(PYTEST_ARGS)"

# The whole Python 3.11 suite under branch coverage, on $(WORKERS) pytest-xdist workers:
# pytest-cov measures each worker and saves its data before the worker finishes, coverage's
# subprocess patch measures every Python subprocess a test starts, and the controller
# combines them all before the report (a worker whose data is missing fails the run:
# tests/support/coverage_workers.py). The run ends with its 20 slowest tests and the 20 test
# files that took the most CPU seconds, their subprocesses included (tests/support/file_cpu.py).
test-suite: $(STAMP)
	rm -f .coverage .coverage.*
	$(BIN)/python -m pytest -p no:cacheprovider -n $(WORKERS) --dist loadfile --strict-skips \
		--cov --cov-report=term-missing:skip-covered --durations=20 --file-cpu=20 $(PYTEST_ARGS)

# The inner loop (about 4 minutes on 2 idle cores, warm): the Python 3.11 suite on $(WORKERS)
# workers without coverage, the release check, the real-release matrix, the docs build or
# Python 3.10.
# Plain `pytest tests/...` stays the way to run a few tests.
test-fast: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -n $(WORKERS) \
		-m "not release and not release_matrix" $(PYTEST_ARGS)

# Python 3.10, the oldest Python fi-compat claims, in a second venv (.venv310) with pytest,
# hypothesis and coverage (the result cache's tests read coverage data; the run itself is not
# measured, so no pytest-cov) but neither torch nor FlashInfer (flashinfer-python needs torch, and torch 2.13.0
# CPU lies on disk for 3.11 only): every test that needs no torch runs, the others skip saying
# so. Fails when there is no Python 3.10 (scripts/find_python310.sh says where it looked;
# PYTHON310=/path/to/python3.10 overrides).
$(STAMP310): pyproject.toml constraints/dev.txt scripts/find_python310.sh
	test -x $(VENV310)/bin/python || { \
		python310=$$(sh scripts/find_python310.sh) && "$$python310" -m venv $(VENV310); }
	$(VENV310)/bin/python $(UV_BOOTSTRAP)
	$(VENV310)/bin/uv $(UV_INSTALL) --python $(VENV310)/bin/python \
		pip -e . pytest hypothesis pytest-examples pytest-xdist coverage jsonschema
	touch $(STAMP310)

test-py310: $(STAMP310)
	$(VENV310)/bin/python -m pytest -p no:cacheprovider -n $(WORKERS) --dist loadfile --strict-skips \
		--durations=20 --file-cpu=20 $(PYTEST_ARGS)

# The release check alone (tests/release/, marker `release`, also part of `make test`): builds
# the sdist and the wheel into a temporary directory with `python -m build`, runs
# `twine check --strict` and `check-wheel-contents`, checks both file lists, installs the
# wheel into a fresh venv (pytest and torch pinned by constraints/dev.txt, no FlashInfer) and
# runs `fi-compat report --json` and the pytest plugin from there (about a minute).
release-check: $(STAMP)
	$(BIN)/python -m pytest -p no:cacheprovider -m release tests/release

# The distributions to upload, in dist/, after the release check passed.
dist: release-check
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/python -m twine check --strict dist/*
	$(BIN)/python -m check_wheel_contents dist/*.whl

# The documentation site, built into a temporary directory: fails on a broken link or
# reference, or a generated release table that drifted from the recorded data.
docs: $(STAMP)
	$(BIN)/mkdocs build --strict -d $$(mktemp -d)/site

# Every bench/bench_*.py in a fresh interpreter, one after the other (on an otherwise idle
# machine); their figures go to bench/results.json and bench/results.md, which
# docs/benchmarks.md includes. Commit both: the docs show the last run's figures.
bench: $(STAMP)
	$(BIN)/python -m tools.bench --write
	$(BIN)/python -m tools.charts --write --only bench

# Screenshots of the pages that show charts, taken by headless Chromium from a fresh build
# of the site (apt-get install chromium): build/screenshots/{releases,attention,benchmarks}.png.
SCREENSHOT_PAGES := releases guide/attention benchmarks
screenshots: $(STAMP)
	rm -rf build/site build/screenshots && mkdir -p build/screenshots
	$(BIN)/mkdocs build --strict -d build/site
	for page in $(SCREENSHOT_PAGES); do \
		chromium --headless --no-sandbox --disable-gpu --hide-scrollbars \
			--window-size=1400,4200 --screenshot=build/screenshots/$$(basename $$page).png \
			file://$(CURDIR)/build/site/$$page/index.html || exit 1; \
	done
	ls -l build/screenshots

# Maintainer tooling (tools/, not in the wheel). Releases are downloaded once into
# ~/.cache/fi-compat/releases (set FI_COMPAT_RELEASE_CACHE to move it).
# `make record V=0.7.3` (re)records one release into fi_compat/_records/.
record: $(STAMP)
	@test -n "$(V)" || { echo "usage: make record V=<flashinfer-python version>" >&2; exit 2; }
	$(BIN)/python -m tools.record $(V)

# `make add-release V=0.7.4` adds one FlashInfer release to the shipped data in one go: the
# release list, its record, its three measurements, the release classes, the docs' tables and
# charts; then prints `fi-compat diff <previous> V` for review (tools/add_release.py).
add-release: $(STAMP)
	@test -n "$(V)" || { echo "usage: make add-release V=<flashinfer-python version>" >&2; exit 2; }
	$(BIN)/python -m tools.add_release $(V)

# Re-records every release in fi_compat/_records/releases.txt.
record-all: $(STAMP)
	$(BIN)/python -m tools.record --all

# `make measure-reach` re-measures, for every recorded release from 0.4.0, which attention
# wrapper families and backends hand the split settings to the kernel, into
# fi_compat/_measured/reach.json (about 2.5 min; `V=0.7.3` measures one release).
measure-reach: $(STAMP)
	$(BIN)/python -m tools.reach $(V)

# `make measure-layers` re-measures, for every recorded release from 0.6.0, what the public
# allreduce_fusion passes to the legacy trtllm_allreduce_fusion on a TRT-LLM workspace and
# what it checks on the way, into fi_compat/_measured/layers.json (about 4 min; `V=0.7.3` measures
# one release).
measure-layers: $(STAMP)
	$(BIN)/python -m tools.layers $(V)

# `make measure-sizes` re-measures, for every recorded release from 0.6.0, which call sizes
# (tokens x hidden) one fused workspace serves on the TRT-LLM and MNNVL backends, what reaches
# the kernel and what is_buffer_size_sufficient answers, into tools/measurements/sizes.json,
# and what the runtime reads of it into fi_compat/_measured/sizes.json (about 2.5 min; `V=0.7.3`
# measures one release).
measure-sizes: $(STAMP)
	$(BIN)/python -m tools.sizes $(V)

# Prints how griffe's reading of every recorded release compares with the recorded JSON.
compare-griffe: $(STAMP)
	$(BIN)/python -m tools.compare_griffe

clean:
	rm -rf $(VENV) $(VENV310) .stages .coverage .coverage.* .pytest_cache .mypy_cache .ruff_cache .hypothesis build dist *.egg-info
