# Two commands for a fresh machine: `make demo` (set up + a real federated run) and `make test`.
# `make docs` builds the documentation site (docs/ -> site/) and fails on any warning.
# `make status` regenerates the reproduction status (README, docs/results/status.md and each
# paper's list of tables and figures) from the committed result tables.
VENV ?= .venv
PY := $(VENV)/bin/python
# torch is installed pinned first so that the project's torch range resolves to it (a CPU wheel);
# override e.g. `make TORCH_SPEC="torch==2.5.1" test` for another build.
TORCH_SPEC ?= torch==2.13.0
export GRAPHFED_DATA ?= $(abspath ../shared/datasets)

.PHONY: setup demo test lint bench docs status
setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -e '.[dev,flower,docs,tensorboard,mlflow,chem,privacy,sweep]'
	touch $@

demo: setup
	$(VENV)/bin/graphfed run configs/quickstart.yaml

# the suite in TEST_WORKERS processes (pytest-xdist), a test file each at a time, the longest
# files first (tests/conftest.py); TEST_WORKERS=0 runs it in this one process
TEST_WORKERS ?= 2
test: setup
	$(VENV)/bin/python -m pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# ruff, the import contracts of pyproject.toml (the layers; a new import cycle fails) and mypy,
# strict on the modules [tool.mypy] lists (its cache in .mypy_cache)
lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy

bench: setup
	$(VENV)/bin/python benchmarks/round_time.py

# the generated status parts of README.md, docs/results/status.md and docs/results/<paper>.md,
# rewritten from the committed docs/results/*/table.csv (python -m graphfed.reproduce.status)
status: setup
	$(PY) -m graphfed.reproduce.status

# first the status check (a page that differs from the committed tables fails the build), then
# --strict: a broken link or anchor, a page missing from the nav or an API entry that no longer
# matches the code fails the build. NO_MKDOCS_2_WARNING silences Material's MkDocs-2.0 banner.
docs: setup
	$(PY) -m graphfed.reproduce.status --check
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict
