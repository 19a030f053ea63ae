# `make demo` and `make test` do all the set-up on a fresh machine: they create
# .venv, install rltrack with every extra at the pinned versions, then run.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

$(STAMP): pyproject.toml requirements/constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c requirements/constraints.txt -e ".[all,test]"
	$(PY) -m pip install -q --no-deps dm-acme==0.4.0
	touch $(STAMP)

demo: $(STAMP)
	$(PY) examples/sb3_ppo_cartpole.py

test: $(STAMP)
	# the HTML report test opens pages in a real headless Chromium (Debian's package)
	command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium) || echo 'chromium not installed: the report test will fail'
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/bench_write.py

clean:
	rm -rf $(VENV) runs
