# Two commands: `make demo` and `make test`. Both set everything up on a fresh machine (Java 17 + Maven + Python 3.11).
# `make check` is the quick tier: lint, types and every test that needs no running service.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
LDP    := $(VENV)/bin/ldp
PYTEST_ARGS ?=
# pip's own notices and the editable build's chatter stay out of the terminal; errors still show
PIP    := $(PY) -m pip install -q --disable-pip-version-check
# Bytecode is written, whatever the shell says: under PYTHONDONTWRITEBYTECODE every pytest process would rewrite the
# asserts of every test module again (half of its 16 s collection here) and every process compile what it imports.
unexport PYTHONDONTWRITEBYTECODE
# The test brokers' JVMs compile with C1 only: a broker start costs about 6 CPU-s instead of 10 here, and the
# tests' loads are light. (`ldp up` outside `make test` keeps Java's defaults.)
TEST_JVM := JAVA_TOOL_OPTIONS=-XX:TieredStopAtLevel=1

.PHONY: demo test check lint types docs test-cluster install install-test up down status bench clean compose-secrets chromium \
	prometheus fashion-mnist debian-packages

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP) --upgrade pip
	$(PIP) -e '.[server,plots]'
	touch $@

$(VENV)/.installed-test: $(VENV)/.installed pyproject.toml
	$(PIP) -e '.[server,test,plots,data,dev,docs,client]'
	touch $@

# The TypeScript device SDK (sdk/typescript): its npm dependencies (the lock file's versions), then tsc and the
# browser bundle; node_modules and dist are git-ignored. Node.js 20+ and npm come with the machine.
TS_SDK := sdk/typescript
$(TS_SDK)/node_modules/.installed: $(TS_SDK)/package.json $(TS_SDK)/package-lock.json
	cd $(TS_SDK) && npm ci --no-audit --no-fund --loglevel=error
	touch $@

$(TS_SDK)/dist/.built: $(TS_SDK)/node_modules/.installed $(TS_SDK)/tsconfig.json $(TS_SDK)/scripts/bundle.mjs \
		$(wildcard $(TS_SDK)/src/*.ts $(TS_SDK)/src/*/*.ts)
	cd $(TS_SDK) && npm run --silent build
	touch $@

# The browser tests drive Debian's Chromium (no browser download): installed when missing, as root (CI).
# Debian's packages the tests use, installed when missing (as root: CI), with one `apt-get update`: Chromium for the
# browser tests (no browser download), Prometheus and promtool for `ldp up --prometheus` and the alert and dashboard
# tests, Fashion-MNIST (MIT licence, no download at run time) for training. `make chromium` etc. install one.
DEBIAN_PACKAGES := chromium=/usr/bin/chromium prometheus=/usr/bin/prometheus \
	dataset-fashion-mnist=/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz
debian-packages:
	@missing=""; for p in $(DEBIAN_PACKAGES); do test -e "$${p#*=}" || missing="$$missing $${p%%=*}"; done; \
	if [ -n "$$missing" ]; then apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; fi
chromium prometheus fashion-mnist:
	@$(MAKE) --no-print-directory debian-packages DEBIAN_PACKAGES="$(filter $(subst fashion-mnist,dataset-fashion-mnist,$@)=%,$(DEBIAN_PACKAGES))"

install: $(VENV)/.installed
install-test: $(VENV)/.installed-test $(TS_SDK)/dist/.built debian-packages
	@# byte-compile the package (only what changed) before the tests' processes start side by side: pip does it for an
	@# install, an editable one compiles on first import, in each process that gets there before a .pyc exists
	@$(PY) -m compileall -q src/ldpstream > /dev/null

up: install
	$(LDP) up

down:
	$(LDP) down

status:
	$(LDP) status

demo: install
	$(LDP) up
	$(LDP) demo

# The quick tier: no Kafka, Redis or edge (tests that need them are marked `integration`, see tests/conftest.py).
check: install-test lint types
	$(PY) -m pytest -q -n auto -m 'not integration and not cluster and not install' -p no:cacheprovider $(PYTEST_ARGS)

lint: install-test
	$(VENV)/bin/ruff check src tests benchmarks deploy

types: install-test
	$(VENV)/bin/mypy src

# The docs site (docs/, mkdocs.yml) into site/, every warning an error (a broken link, a stale reference).
docs: install-test
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet

# Runs the whole suite against real services (stopped afterwards only if this target started them): the tests that
# need no service on every core, then side by side (tests/lanes.py) the integration tests in two lanes, the second
# with a Kafka and a Redis of its own, and the cluster tests with their clusters.
test: install-test docs
	@if $(LDP) status --services-only >/dev/null 2>&1; then started=no; else started=yes; fi; \
	$(TEST_JVM) $(LDP) up || exit 1; \
	$(PY) -m pytest -n auto -m 'not integration and not cluster' $(PYTEST_ARGS) && \
	$(TEST_JVM) $(PY) tests/lanes.py --lanes 2 --cluster -- $(PYTEST_ARGS); rc=$$?; \
	if [ "$$started" = yes ]; then $(LDP) down; fi; \
	exit $$rc

# The cluster tests: they start their own 3-node Kafka and Redis Cluster (temporary state dir, ports 29092-29094,
# 29192-29194, 21001-21006) and stop them at the end; the Kafka jars of `ldp up` are reused when present.
test-cluster: install-test
	$(TEST_JVM) $(PY) -m pytest -m cluster tests/cluster $(PYTEST_ARGS)

# The docker compose deployment's secrets (deploy/secrets/, 0700, git-ignored), made once: see deploy/docker-compose.yml.
compose-secrets: install
	$(LDP) credentials generate --dir deploy/secrets

bench: install
	$(PIP) -e '.[server,bench]'
	$(PY) benchmarks/bench_mechanisms.py

clean:
	-$(LDP) down
	rm -rf $(VENV) .local site $(TS_SDK)/node_modules $(TS_SDK)/dist
