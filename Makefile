# Set-up, run and test. Each target creates or updates the virtual environment
# (.venv) from this project's own files when needed.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# vLLM's CUDA build where an NVIDIA driver is present, its CPU build elsewhere.
VLLM_EXTRA := $(shell command -v nvidia-smi >/dev/null 2>&1 && echo gpu || echo cpu)

.PHONY: grpo test test-fast lint venv clean-venv system-deps

# The multi-host tests simulate hosts with network namespaces: `ip` (iproute2) and
# `nsenter`/`unshare` (util-linux). Installed with apt-get where missing and possible.
system-deps:
	@command -v ip >/dev/null 2>&1 && command -v nsenter >/dev/null 2>&1 || \
	  { command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && \
	    apt-get update -qq && apt-get install -y -qq iproute2 util-linux; } || \
	  echo "warning: iproute2/util-linux missing and not installable here: multi-host tests will be skipped"

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e ".[$(VLLM_EXTRA),test]"
	@# torchstore's metadata pins torch 2.9 and an old torchmonarch; its code works with ours.
	$(PY) -m pip install --no-deps torchstore==0.1.2
	@# CUDA-linked media packages break transformers/vLLM imports on CPU; nothing here needs them.
	$(PY) -m pip uninstall -y torchvision torchaudio torchcodec
	touch $@

venv: $(STAMP)

# Ctrl-C reaches the run, make and the recipe's shell at once. The run saves itself, says how to
# resume and exits 130: the shell waits for it (a trap, where sh would die of the signal and make
# would report an "Interrupt"), and takes its 130 as no error.
grpo: $(STAMP)
	trap : INT; $(PY) -m apps.grpo $(ARGS) || [ $$? -eq 130 ]

test: $(STAMP) system-deps
	$(PY) -m pytest -q $(ARGS)

# The unit lane: every module's unit tests, no procs and no runs (tests/README.md).
test-fast: $(STAMP)
	$(PY) -m pytest -q -m "not procs and not e2e" $(ARGS)

# Format the tree, fix what the linter can (tests/test_lint.py fails on what is left) and
# type-check forge_async/ and apps/ as pyproject.toml's [tool.mypy] says (tests/test_types.py).
lint: $(STAMP)
	$(PY) -m ruff format .
	$(PY) -m ruff check --fix .
	$(PY) -m mypy

clean-venv:
	rm -rf $(VENV)
