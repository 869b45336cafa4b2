# netmon — the two commands a new user needs:
#   make demo   set everything up, then run the demo (broker + pipeline + replay + dashboard)
#   make test   set everything up, then run the linter and the whole test suite
# Prerequisites: Python 3.11+, Java 17+, Maven (the jars come from Maven Central).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.netmon-installed

.PHONY: all setup system-deps demo demo-check test lint fmt bench clean prereqs

all: setup

prereqs:
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "netmon needs Python 3.11 or newer (found " + sys.version.split()[0] + ")")'
	@command -v java >/dev/null || { echo "netmon needs Java 17+ on PATH (e.g. apt-get install openjdk-17-jre-headless)"; exit 1; }
	@command -v mvn >/dev/null || { echo "netmon needs Maven on PATH to fetch the Kafka and Spark jars (e.g. apt-get install maven)"; exit 1; }

# pip's and the build backend's notices (setuptools prints a banner for every editable install)
# go to $(VENV)/pip-install.log, shown only when an install fails.
$(STAMP): pyproject.toml | prereqs
	$(PYTHON) -m venv $(VENV)
	@echo "installing netmon and its Python packages into $(VENV) (log: $(VENV)/pip-install.log)"
	@$(BIN)/pip install --quiet --upgrade pip > $(VENV)/pip-install.log 2>&1 || { cat $(VENV)/pip-install.log; exit 1; }
	@$(BIN)/pip install --quiet -e ".[dev]" >> $(VENV)/pip-install.log 2>&1 || { cat $(VENV)/pip-install.log; exit 1; }
	@touch $(STAMP)

# Virtualenv + Python packages + JVM jars (Kafka broker, Spark's Kafka connector). Idempotent.
setup: system-deps $(STAMP)
	$(BIN)/netmon setup

# System libraries: libpcap for `capture --bpf` (installed with apt-get when root; else a hint).
system-deps:
	@sh scripts/system-deps.sh

demo: setup
	$(BIN)/netmon demo

# The demo without the dashboard: exits 0 once every replayed packet is in the results.
demo-check: setup
	$(BIN)/netmon demo --until-done

test: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/pytest

lint: setup
	$(BIN)/ruff check . && $(BIN)/ruff format --check . && $(BIN)/mypy

fmt: setup
	$(BIN)/ruff check --fix . && $(BIN)/ruff format .

bench: setup
	$(BIN)/netmon bench ingest

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache build *.egg-info
