# trainee — the two commands that matter on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Debian packages the tests use: bwrap (guarded rounds), systemd-analyze (unit checks),
# chromium (the browser test of the web page; Playwright drives it, nothing is downloaded).
EXAMPLE_REQS := $(wildcard examples/*/requirements.txt)

.PHONY: all venv system-deps cluster-deps lint test test-cluster test-fast demo bench bench-decisions bench-compute install-systemd docs clean

all: test

$(STAMP): pyproject.toml $(EXAMPLE_REQS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev,optuna,hydra,tensorboard,mlflow,wandb,notify]' $(addprefix -r ,$(EXAMPLE_REQS))
	@touch $@

venv: $(STAMP)

CLUSTER_STAMP := $(VENV)/.installed-cluster
$(CLUSTER_STAMP): $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,optuna,hydra,tensorboard,mlflow,wandb,notify,ray]'
	@touch $@

# A single-node Slurm (Debian's slurmctld, slurmd, slurm-client, munge) that the
# cluster tests start on loopback themselves; Ray comes from the `ray` extra.
cluster-deps:
	@missing=""; \
	for c in slurmctld:slurmctld slurmd:slurmd sbatch:slurm-client munged:munge; do \
	  command -v $${c%%:*} >/dev/null || missing="$$missing $${c##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing — run: sudo apt-get install$$missing"; exit 1; \
	  fi; \
	fi

# Installs missing Debian packages with apt-get when running as root (CI does);
# otherwise names the command to run.
system-deps:
	@missing=""; \
	command -v bwrap >/dev/null || missing="$$missing bubblewrap"; \
	command -v systemd-analyze >/dev/null || missing="$$missing systemd"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing — run: sudo apt-get install$$missing"; exit 1; \
	  fi; \
	fi

lint: $(STAMP)
	$(VENV)/bin/ruff check trainee tests bench
	$(VENV)/bin/ruff format --check trainee tests bench
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports
	$(PY) docs/gen_api.py --check

test: $(STAMP) system-deps lint
	$(VENV)/bin/pytest -q --ignore=tests/cluster

# Rounds on a real Slurm and a real Ray head, both started by the tests on loopback.
test-cluster: $(CLUSTER_STAMP) system-deps cluster-deps
	$(VENV)/bin/pytest -q tests/cluster

test-fast: $(STAMP)
	$(VENV)/bin/pytest -q -x -m "not e2e" --ignore=tests/cluster

demo: $(STAMP) system-deps
	$(PY) -m trainee.demo

bench: $(STAMP) system-deps
	@for b in bench/bench_*.py bench/soak.py bench/abuse.py; do echo "== $$b"; $(PY) $$b || exit 1; done


bench-decisions: $(STAMP)
	$(PY) bench/decision_quality.py

# Compute used against best reached, with and without run.prune (examples/lr-cliff);
# e.g. make bench-compute COMPUTE_OUT=/tmp/compute COMPUTE_ARGS="--seeds 2 --rounds 8"
COMPUTE_OUT ?= bench/out/compute
bench-compute: $(STAMP)
	$(PY) bench/compute.py $(COMPUTE_OUT) $(COMPUTE_ARGS)

install-systemd:
	bash systemd/install.sh "$$(command -v trainee || echo $(abspath $(VENV))/bin/trainee)"

docs: $(STAMP)
	$(PY) docs/gen_api.py

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
