"""The suite's lane rules (tests/lanes.py), for `python -m pytest` and `.venv/bin/pytest` alike: only the
root conftest may name plugins, and unlike `-p` in addopts it finds the `tests` package on any start."""

pytest_plugins = ["tests.support.lanes"]
