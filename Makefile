# Two commands for a newcomer: `make demo` and `make test`. The logic lives in scripts/.
.DEFAULT_GOAL := help
.PHONY: help venv demo test lint bench image-test check unit

help:
	@echo "make demo   deliver demo webhooks on SQLite to a local receiver, then serve the dashboard"
	@echo "            (DEMO_SERVE=0: check the dashboard once and exit; DEMO_PORT=8000)"
	@echo "make test   lint, then the whole test suite against MariaDB (PYTEST_ARGS=..., GORGE_TEST_DB=...)"
	@echo "make lint   ruff, ruff format --check, mypy, makemigrations --check, manage.py check"
	@echo "make check  the quick lane while editing: tests without lint, browser or slow tests (MariaDB)"
	@echo "make unit   the database-free lane, about a minute: tests that need no database, no MariaDB needed"
	@echo "make bench  delivery throughput, latency, 1M-row history and memory figures (BENCH_ARGS=--quick)"
	@echo "            (BASE=REV: the same figures of commit REV and this tree side by side, and their ratios)"
	@echo "make image-test  build the image with podman and run web, worker and demo from it for real"

venv:
	@scripts/bootstrap.sh

demo:
	@scripts/demo.sh

test:
	@scripts/test.sh

lint: venv
	@scripts/lint.sh

bench: venv
	@if [ -n "$(BASE)" ]; then .venv/bin/python bench/compare.py $(BASE) -- $(BENCH_ARGS); \
	else .venv/bin/python bench/run.py $(BENCH_ARGS); fi

image-test:
	@scripts/image-test.sh

check:
	@scripts/check.sh

unit:
	@scripts/unit.sh
