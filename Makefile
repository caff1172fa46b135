# toolloop — developer commands. `make test` is what CI runs.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install test lint typecheck unit demo bench clean

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
	$(BIN)/mypy toolloop_cli

unit: install
	$(BIN)/pytest

test: lint typecheck unit

# The refund demo, offline, from the bundled OpenAI Responses recording. It stops
# WAITING_APPROVAL (exit 10) and prints the commands to approve and resume.
DEMO_STORE ?= .toolloop-demo/store.db
demo: install
	rm -rf $(dir $(DEMO_STORE))
	$(BIN)/toolloop run "Order ord_1001 arrived damaged. Look it up, refund it in full, and tell me what you did." \
		--registry registries/refunds.yaml --transcript transcripts/refund-openai.yaml \
		--store $(DEMO_STORE); code=$$?; test $$code -eq 10 || exit $$code

bench: install
	$(BIN)/python bench/run.py

clean:
	rm -rf $(VENV) .toolloop .toolloop-demo .mypy_cache .ruff_cache .pytest_cache
