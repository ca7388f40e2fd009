# Two commands do all set-up on a fresh machine (Python 3.10+):
#   make train   create .venv if missing, install the package, run the embedded demo (offline)
#   make test    create .venv if missing, install the package with test extras, run ruff and the test suite
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: train test test-fast lint fuzz install install-test bench docs clean wordnet chromium downstream

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(VENV)/.installed $@

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test

train: $(VENV)/.installed
	WANDB_MODE=offline $(PY) train.py $(ARGS)

test: lint wordnet chromium
	WANDB_MODE=offline OMP_NUM_THREADS=2 $(PY) -m pytest $(PYTEST_ARGS)

# ruff (configured in pyproject.toml): the lint rules and the formatting, over the whole repository
lint: $(VENV)/.installed-test
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .

# WordNet 3.0 noun files (Debian's wordnet-base) for the taxonomy tests; best effort: where apt-get is missing or not
# allowed the WordNet tests skip and say why. Never fails the build.
wordnet:
	@test -f /usr/share/wordnet/data.noun || { command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -q wordnet-base >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -q wordnet-base >/dev/null 2>&1; } || \
		  sudo -n apt-get install -y -q wordnet-base >/dev/null 2>&1; } || \
		echo "wordnet-base not installed (apt-get unavailable or not permitted): the WordNet tests will skip"; } || true

# Headless Chromium (Debian's chromium) for the test that opens the HTML report as a person would; best effort: where
# apt-get is missing or not allowed that test skips and says why. Never fails the build.
chromium:
	@{ command -v chromium || command -v chromium-browser || command -v google-chrome; } >/dev/null 2>&1 || \
	{ command -v apt-get >/dev/null 2>&1 && \
		{ apt-get install -y -q chromium >/dev/null 2>&1 || \
		  { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -q chromium >/dev/null 2>&1; } || \
		  sudo -n apt-get install -y -q chromium >/dev/null 2>&1; } || \
		echo "chromium not installed (apt-get unavailable or not permitted): the browser test of the HTML report will skip"; } || true

# Everything but the slow end-to-end runs (train.py subprocesses, multi-process DDP).
test-fast: $(VENV)/.installed-test
	WANDB_MODE=offline OMP_NUM_THREADS=2 $(PY) -m pytest -m "not slow" $(PYTEST_ARGS)

# Every reader of files from elsewhere fuzzed with many random examples (tests/io/test_fuzz_readers.py; `make test`
# runs a few seeded ones each time). FUZZ_EXAMPLES sets the examples per reader (2000: about 15 minutes on 2 cores).
FUZZ_EXAMPLES ?= 2000
fuzz: $(VENV)/.installed-test
	WANDB_MODE=offline OMP_NUM_THREADS=2 BEYONDLABELS_FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) BEYONDLABELS_FUZZ_RANDOM=1 \
		$(PY) -m pytest -p no:cacheprovider tests/io/test_fuzz_readers.py $(PYTEST_ARGS)

# The built wheel installed with pip into an environment of its own, and a small outside project run there
# (tests/downstream/; part of `make test`). The first run makes the environment under build/downstream/ (minutes:
# torch and the rest); later runs reinstall the wheel only.
downstream: $(VENV)/.installed-test
	WANDB_MODE=offline OMP_NUM_THREADS=2 $(PY) -m pytest -p no:cacheprovider tests/downstream $(PYTEST_ARGS)

bench: $(VENV)/.installed-test
	$(PY) benchmarks/bench_retrieval.py

# The API reference from the docstrings (mkdocs + mkdocstrings, warnings as errors) in site/
docs: $(VENV)/.installed-test
	$(PY) scripts/build_docs.py site

clean:
	rm -rf $(VENV) build dist site src/*.egg-info .pytest_cache
