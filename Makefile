# `make demo` and `make test` do all the set-up on a fresh machine: they create
# .venv, install rltrack with every extra at the versions of
# requirements/constraints.txt, then run. `make test-oldest` does the same in
# .venv-oldest with the oldest versions rltrack supports
# (requirements/constraints-oldest.txt) and runs the framework, tracker and
# platform tests (OLDEST_TESTS below); .ci/run runs both.
# `make test-fast` runs every test not marked `slow` (no Ray, no outage, no
# crash and sweep scenarios): minutes, for the edit-test loop. `make test` runs
# everything and is what CI runs.
VENV ?= .venv
OLDEST_VENV ?= .venv-oldest
PY := $(VENV)/bin/python
# the tests that meet the frameworks and the trackers themselves
OLDEST_TESTS := tests/frameworks tests/backends tests/core/test_platform.py

.PHONY: demo test test-fast test-oldest chromium bench clean

# $(call install,venv,constraints,requirements,no-deps packages): torch first, alone, as the CPU
# build on this machine's disk (a range would take a CUDA build of several GB);
# dm-acme last with --no-deps (it pins dm-launchpad, which has no wheels for
# Python >= 3.11), and in the oldest environment tianshou and rsl-rl-lib too
# (see requirements/constraints-oldest.txt).
define install
	python3 -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q -c $(2) torch
	$(1)/bin/python -m pip install -q -c $(2) -e ".[all,test]" -r $(3)
	$(1)/bin/python -m pip install -q -c $(2) --no-deps dm-acme $(4)
	touch $(1)/.installed
endef

$(VENV)/.installed: pyproject.toml requirements/constraints.txt requirements/test.txt
	$(call install,$(VENV),requirements/constraints.txt,requirements/test.txt)

$(OLDEST_VENV)/.installed: pyproject.toml requirements/constraints-oldest.txt requirements/test-oldest.txt
	$(call install,$(OLDEST_VENV),requirements/constraints-oldest.txt,requirements/test-oldest.txt,tianshou rsl-rl-lib)

demo: $(VENV)/.installed
	$(PY) examples/sb3_ppo_cartpole.py

test: $(VENV)/.installed chromium
	$(PY) -m pytest -q

test-fast: $(VENV)/.installed chromium
	$(PY) -m pytest -q -m "not slow"

test-oldest: $(OLDEST_VENV)/.installed
	$(OLDEST_VENV)/bin/python -m pytest -q $(OLDEST_TESTS)

# the HTML report test opens pages in a real headless Chromium (Debian's package)
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo 'chromium not installed: the report test will fail'

bench: $(VENV)/.installed
	$(PY) bench/bench_write.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) runs
