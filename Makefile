# `make demo` and `make test` do all the set-up on a fresh machine: they create
# .venv, install rltrack with every extra at the versions of
# requirements/constraints.txt, then run. `make test-oldest` does the same in
# .venv-oldest with the oldest versions rltrack supports
# (requirements/constraints-oldest.txt) and runs the framework, tracker and
# platform tests (OLDEST_GROUPS below); .ci/run runs both.
# `make test-fast` runs every test not marked `slow` (no Ray, no outage, no
# crash and sweep scenarios): minutes, for the edit-test loop. `make test` runs
# everything and is what CI runs. `make test-reliability` runs the 18
# reliability scenarios (kills, full disk, poison) again beside a busy loop
# on every core (issue 37; CI runs it once, last): 7 min 38 s on this 2-core
# machine at load 20-29 (2026-11-27). `make docs` builds the documentation site
# into site/ (mkdocs --strict: a warning fails it); `make dist` builds the
# sdist and the wheel into dist/ and checks them (twine check).
#
# WHEEL: what the venvs install rltrack from. Empty (the default): this
# checkout, editable. A built wheel (.ci/run: `make test WHEEL=dist/...whl`):
# the suite, the demo and the docs then run against the installed package,
# with PYTHONSAFEPATH=1 keeping the checkout off sys.path, so a file the wheel
# lacks fails CI.
WHEEL ?=
VENV ?= .venv
OLDEST_VENV ?= .venv-oldest
PY := $(VENV)/bin/python
# The suite runs in groups of folders at once, a pytest each (tests/shards.sh):
# its tests mostly wait on agents, tracker servers and training children, so
# one pytest leaves a core idle (the whole suite took ~50 min in one pytest,
# 2026-11-27). The last group is every other folder of tests/.
SUITE_GROUPS := "tests/agent" "tests/backends tests/core" "$(filter-out tests/agent/ tests/backends/ tests/core/ tests/helpers/,$(wildcard tests/*/))"
# the oldest lane: the tests that meet the frameworks and the trackers themselves
OLDEST_GROUPS := "tests/frameworks" "tests/backends tests/core/test_platform.py"
DIST_VENV ?= .venv-dist
comma := ,
RLTRACK_REQ = $(if $(WHEEL),"rltrack[all$(comma)test] @ file://$(abspath $(WHEEL))",-e ".[all$(comma)test]")
RUN_ENV = $(if $(WHEEL),PYTHONSAFEPATH=1,)

.PHONY: demo test test-fast test-oldest test-reliability chromium bench docs dist clean

# $(call install,venv,constraints,requirements,no-deps packages): torch first, alone, as the CPU
# build on this machine's disk (a range would take a CUDA build of several GB);
# dm-acme last with --no-deps (it pins dm-launchpad, which has no wheels for
# Python >= 3.11), in the main environment rliable and arch too (tests/runs
# cross-checks with rliable, whose arch pin clashes with pandas 3), pufferlib-core
# (it pins torch==2.9.0) and rl-games (1.6.5 pins psutil < 6; what it needs to
# train is there), and in the oldest environment tianshou and rsl-rl-lib too
# (see requirements/constraints-oldest.txt). With a wheel, the rltrack there is
# removed first (a rebuild at the same version would be "already satisfied").
define install
	python3 -m venv $(1)
	$(1)/bin/python -m pip install -q --upgrade pip
	$(1)/bin/python -m pip install -q -c $(2) torch
	$(if $(WHEEL),$(1)/bin/python -m pip uninstall -q -y rltrack)
	$(1)/bin/python -m pip install -q -c $(2) $(RLTRACK_REQ) -r $(3)
	$(1)/bin/python -m pip install -q -c $(2) --no-deps dm-acme $(4)
	touch $(1)/.installed
endef

# $(call installed,python): with WHEEL, says which rltrack the runs import and
# fails unless it is the installed package (never the checkout).
FROM_SITE_PACKAGES = import rltrack$(comma) sys; print("rltrack under test:"$(comma) rltrack.__file__); sys.exit("site-packages" not in rltrack.__file__)
define installed
	$(if $(WHEEL),PYTHONSAFEPATH=1 $(1) -c '$(FROM_SITE_PACKAGES)')
endef

$(VENV)/.installed: pyproject.toml requirements/constraints.txt requirements/test.txt $(WHEEL)
	$(call install,$(VENV),requirements/constraints.txt,requirements/test.txt,rliable arch pufferlib-core rl-games)

$(OLDEST_VENV)/.installed: pyproject.toml requirements/constraints-oldest.txt requirements/test-oldest.txt requirements/test-oldest-nodeps.txt requirements/test-oldest-cleanrl-ppo.txt $(WHEEL)
	$(call install,$(OLDEST_VENV),requirements/constraints-oldest.txt,requirements/test-oldest.txt,tianshou rsl-rl-lib)
	$(OLDEST_VENV)/bin/python -m pip install -q -c requirements/constraints-oldest.txt --no-deps --ignore-requires-python -r requirements/test-oldest-nodeps.txt || (rm -f $@; exit 1)
	rm -rf $(OLDEST_VENV)/cleanrl-ppo && $(OLDEST_VENV)/bin/python -m pip install -q --no-deps --target $(OLDEST_VENV)/cleanrl-ppo -r requirements/test-oldest-cleanrl-ppo.txt || (rm -f $@; exit 1)

demo: $(VENV)/.installed
	$(call installed,$(PY))
	$(RUN_ENV) $(PY) examples/sb3_ppo_cartpole.py

test: $(VENV)/.installed chromium
	$(call installed,$(PY))
	$(RUN_ENV) tests/shards.sh $(PY) $(SUITE_GROUPS) -- -q

test-fast: $(VENV)/.installed chromium
	$(call installed,$(PY))
	$(RUN_ENV) tests/shards.sh $(PY) $(SUITE_GROUPS) -- -q -m "not slow"

test-oldest: $(OLDEST_VENV)/.installed
	$(call installed,$(OLDEST_VENV)/bin/python)
	$(RUN_ENV) tests/shards.sh $(OLDEST_VENV)/bin/python $(OLDEST_GROUPS) -- -q

# the site's tools (requirements/docs.txt) beside rltrack in .venv: the
# configuration page is generated from rltrack's own config definition
$(VENV)/.docs-installed: $(VENV)/.installed requirements/docs.txt requirements/constraints.txt
	$(PY) -m pip install -q -c requirements/constraints.txt -r requirements/docs.txt
	touch $@

docs: $(VENV)/.docs-installed
	$(RUN_ENV) NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict --site-dir site

# build and twine in a small venv of their own: dist comes before .venv
# exists in CI (.venv installs the wheel built here)
$(DIST_VENV)/.installed: requirements/dist.txt requirements/constraints.txt
	python3 -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install -q -c requirements/constraints.txt -r requirements/dist.txt
	touch $@

dist: $(DIST_VENV)/.installed
	rm -rf dist
	$(DIST_VENV)/bin/python -m build --outdir dist .
	$(DIST_VENV)/bin/python -m twine check --strict dist/*

# The reliability lane (issue 37): the scenarios marked `reliability` (kills,
# a full disk, poison) beside a busy loop on every core, RELIABILITY_RUNS
# times, each run with a base temp of its own; the loops are stopped however
# it ends. CI runs it once (.ci/run), against the wheel like the other lanes:
# each scenario then runs quiet in `make test` and loaded here.
# RELIABILITY_LOAD_NICE: the loops' niceness. 0 (default, issue 42): training's
# and the agent's own, training on every core; the lane took 3 min 36 s so on a
# quiet 2-core machine (2026-11-29, 36 passed), 2 min 48 s with the loops at 19.
RELIABILITY_RUNS ?= 1
RELIABILITY_LOAD_NICE ?= 0
test-reliability: $(VENV)/.installed
	$(call installed,$(PY))
	@cores=$$(nproc); loops=""; \
	for i in $$(seq $$cores); do nice -n $(RELIABILITY_LOAD_NICE) $(PY) -c "while 1: pass" & loops="$$loops $$!"; done; \
	trap "kill $$loops" EXIT; failed=0; \
	for run in $$(seq $(RELIABILITY_RUNS)); do \
		echo "reliability lane: run $$run of $(RELIABILITY_RUNS) beside $$cores busy loops (nice $(RELIABILITY_LOAD_NICE))"; \
		basetemp=$$(mktemp -d); \
		$(RUN_ENV) $(PY) -m pytest -q -m reliability -p no:cacheprovider --basetemp=$$basetemp || failed=1; \
		rm -rf $$basetemp; \
	done; exit $$failed

# the HTML report test opens pages in a real headless Chromium (Debian's package)
chromium:
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo 'chromium not installed: the report test will fail'

bench: $(VENV)/.installed
	$(PY) bench/bench_write.py

clean:
	rm -rf $(VENV) $(OLDEST_VENV) $(DIST_VENV) runs site dist
