# nightly-e2e: the two commands are `make nightly` (one whole night of the example framework)
# and `make test` (the test suite). Both install what they need first.

# the interpreter the virtualenv is made with (pyproject.toml's requires-python: 3.11 or 3.12), e.g.
# `make nightly PY=python3.11` where python3 is another version; its version is part of the stamp, so a
# different PY makes the virtualenv again with it. Not given (on the command line or in the environment):
# the interpreter that made .venv when requires-python allows it, so after one `make install PY=python3.11`
# a plain `make test` keeps that virtualenv; else python3
VENV    := .venv
BIN     := $(VENV)/bin
ifeq ($(origin PY),undefined)
VENV_MAKER := $(shell $(BIN)/python scripts/check-python.py --venv-maker pyproject.toml 2>/dev/null)
PY      := $(or $(VENV_MAKER),python3)
endif
PY_VERSION := $(shell $(PY) -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null)
STAMP   := $(VENV)/.installed-py$(PY_VERSION)-$(shell cat requirements.lock build-constraints.lock pyproject.toml | cksum | cut -d' ' -f1)
PYTEST_ARGS ?=

# the local state `make clean-state` removes: $NIGHTLY_HOME when set, else .nightly/ (as `nightly` reads it)
STATE   := $(or $(NIGHTLY_HOME),.nightly)

.PHONY: install system-deps nightly test test-fast test-fast-lane-a test-fast-lane-b test-loaded ui bench lint clean distclean clean-state help

help:
	@echo "make nightly   run one whole nightly of examples/minirl on the local default (Dagster, SQLite)"
	@echo "make test      run the test suite (installs Python deps, Chromium, Nix, PostgreSQL if missing)"
	@echo "make test-fast the unit tests only (not marked slow), for the edit loop"
	@echo "make test-loaded  make test under 4 busy processes (scripts/loaded-test.sh; LOADED_ARGS=\"--runs 3\")"
	@echo "make ui        open the Dagster UI on the same instance (http://127.0.0.1:3000)"
	@echo "make bench     print the benchmark figures (bench/)"
	@echo "make lint      ruff over the package, tests, benchmarks and examples (as make test)"
	@echo "make install   the virtualenv .venv only (every target above makes it first)"
	@echo "make system-deps  Chromium, Nix, PostgreSQL, kubectl, python3-venv (apt) if missing"
	@echo "make clean     remove caches (.pytest_cache, .ruff_cache); keeps .venv and the nightly state"
	@echo "make distclean make clean and remove .venv (the next target makes it again)"
	@echo "make clean-state  DELETE the local nightly state $(STATE)/ (history, quarantine, estimates, nights, logs, Dagster runs)"
	@echo "PY=python3.11  the Python that makes .venv (3.11 or 3.12, as pyproject.toml's requires-python; default: the one that made .venv, else python3)"

# a $(PY) that requires-python excludes stops here, saying which PY= to pass; a venv without pip (made by
# a python3 lacking python3-venv) or made by another Python than $(PY) is made again, not kept forever.
# `uv pip sync`, not install: a pin dropped from the lock leaves .venv too, so local tests see what CI has;
# it keeps uv itself and pip (the venv's seed) and removes the project, installed again after it
$(STAMP): requirements.lock build-constraints.lock pyproject.toml
	@command -v $(PY) >/dev/null 2>&1 || { echo "make: $(PY) not found: install a Python 3.11 or 3.12 with its venv module (your distribution's packages where it has one, else e.g. uv python install 3.12) or pass PY=/path/to/python3.N" >&2; exit 1; }; $(PY) scripts/check-python.py "$(PY)" "$(MAKECMDGOALS)" pyproject.toml
	v='import sys; print(sys.version)'; [ "$$($(BIN)/python -c "$$v" 2>/dev/null)" = "$$($(PY) -c "$$v")" ] && $(BIN)/python -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV); $(PY) -m venv $(VENV) && $(BIN)/python -m pip --version >/dev/null 2>&1 || { rm -rf $(VENV); echo "make: '$(PY) -m venv' failed: install python3-venv (apt-get install python3-venv)" >&2; exit 1; }; }
	$(BIN)/python -m pip install -q --disable-pip-version-check uv==0.13.9
	$(BIN)/uv pip sync -q --python $(BIN)/python requirements.lock
	$(BIN)/uv pip install -q --python $(BIN)/python --no-deps --build-constraint build-constraints.lock -e .
	rm -f $(VENV)/.installed-*
	touch $(STAMP)

install: $(STAMP)

# with the PY the virtualenv is made with: its venv module is what python3-venv is checked for
system-deps:
	PY="$(PY)" bash scripts/system-deps.sh

nightly: install
	$(BIN)/nightly run $(NIGHTLY_ARGS)

test: system-deps install
	$(BIN)/ruff check pipelines tests bench examples
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# the edit loop: every test not marked slow (no Dagster run, night, browser, S3 server or framework
# subprocess). With no PYTEST_ARGS it runs as two pytest processes side by side, one per CPU of
# the 2-CPU machine (lane a: the folders below; lane b: everything else, new folders included),
# each lane's output printed when it ends. A test still running after 300 s gets its stack printed.
FAST       := $(BIN)/python -m pytest -m "not slow" -q -o faulthandler_timeout=300
FAST_LANE_A := tests/storage tests/cli tests/defs tests/support tests/core/plan tests/core/coverage tests/examples tests/reporting

test-fast: install
ifeq ($(strip $(PYTEST_ARGS)),)
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-fast-lane-a test-fast-lane-b
else
	$(FAST) $(PYTEST_ARGS)
endif

test-fast-lane-a:
	$(FAST) $(wildcard $(FAST_LANE_A))

test-fast-lane-b:
	$(FAST) tests $(addprefix --ignore=,$(FAST_LANE_A))

# `make test` under a CPU load made by the script itself; LOADED_ARGS="--runs 3" or "--workers 0"
test-loaded: system-deps install
	bash scripts/loaded-test.sh $(LOADED_ARGS)

ui: install
	$(BIN)/nightly ui

bench: install
	$(BIN)/python bench/overhead.py
	$(BIN)/python bench/catalog.py
	$(BIN)/python bench/plan.py
	$(BIN)/python bench/calibration.py
	$(BIN)/python bench/history_import.py
	$(BIN)/python bench/coverage.py
	$(BIN)/python bench/report.py
	$(BIN)/python bench/reliability.py
	$(BIN)/python bench/logcap.py
	$(BIN)/python bench/history.py
	$(BIN)/python bench/paths.py

lint: install
	$(BIN)/ruff check pipelines tests bench examples

# build artefacts only: the state folder holds history, manual quarantines with who and why, calibrated
# estimates and the Dagster instance, which no rebuild brings back (clean-state, by name, removes it)
clean:
	rm -rf .pytest_cache .ruff_cache

distclean: clean
	rm -rf $(VENV)

# a state folder: one with a name only nightly gives (history.sqlite, dagster/, nights/ ...), or one holding
# nothing but names nightly writes there (`nightly catalog`/`plan` leave only cache/; scripts/loaded-test.sh
# .nightly/loaded-test/); those alone are common names, so a folder with anything else beside them is kept
clean-state:
	@[ -e "$(STATE)" ] || { echo "make: no state at $(STATE); nothing to remove"; exit 0; }; other=$$(ls -A "$(STATE)" | grep -vxE 'history\.sqlite(-wal|-shm|-journal)?|dagster|nights|runs|estimates|calibration|quarantine|cache|logs|running|reports|unsaved|loaded-test' | head -3 | tr '\n' ' '); [ -z "$$other" ] || { echo "make: $(STATE) does not look like a nightly state folder: it holds $${other}which nightly never writes there; not removed (move them aside, or remove the folder by hand)" >&2; exit 1; }; echo "make: removing the nightly state $(STATE) (history, quarantine, estimates, nights, logs, Dagster runs)"; rm -rf "$(STATE)"
