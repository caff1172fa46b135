# toolloop — developer commands. `make test` is what CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint typecheck unit demo screenshots bench bench-peers clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: install
	$(BIN)/mypy toolloop_cli tests scripts

unit: install
	$(BIN)/pytest -n auto

# the inner loop: everything but the reliability harness and the slow tests (a minute or two)
unit-fast: install
	$(BIN)/pytest -n auto -m "not reliability and not slow"

test: lint typecheck unit

# The refund demo, offline, from the bundled OpenAI Responses recording. It stops
# WAITING_APPROVAL (exit 10) and prints the commands to approve and resume.
DEMO_STORE ?= .toolloop-demo/store.db
demo: install
	rm -rf $(dir $(DEMO_STORE))
	$(BIN)/toolloop run "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did." \
		--registry registries/refunds.yaml --transcript transcripts/refund-openai.yaml \
		--store $(DEMO_STORE); code=$$?; test $$code -eq 10 || exit $$code; \
	echo "toolloop exited 10 (WAITING_APPROVAL): run the commands above after . .venv/bin/activate"

# The report screenshots the README embeds (docs/screenshots/), taken by the browser tests in
# Debian's Chromium; a plain `make test` writes them to its temporary folders instead.
screenshots: install
	TOOLLOOP_UPDATE_SCREENSHOTS=1 $(BIN)/pytest -n 0 tests/report/test_report_browser.py \
		-k "a_completed_run_shows or a_diverging_replay"

# Figures, never assertions: loop overhead against a hand-written floor, scaling, store size,
# cold start, verify throughput and parallel speedup, in one table (bench/run.py).
bench: install
	$(BIN)/python bench/run.py

# The same table plus pydantic-ai, the OpenAI Agents SDK and LangGraph, installed in their
# own venv (bench/.peers-venv, not committed) so they never touch toolloop's dependencies.
PEERS_VENV := bench/.peers-venv
PEERS_STAMP := $(PEERS_VENV)/.installed

$(PEERS_STAMP): bench/peers-requirements.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PEERS_VENV)/bin/python -m pip install --quiet -r bench/peers-requirements.txt
	touch $(PEERS_STAMP)

bench-peers: install $(PEERS_STAMP)
	$(BIN)/python bench/run.py --peers

clean:
	rm -rf $(VENV) .toolloop .toolloop-demo .mypy_cache .ruff_cache .pytest_cache
