"""gorge-webhook for Django: delivers Phorge's Herald webhooks from Phorge's own queue.

The folders are the processes (`worker/` delivers, `web/` serves the pages, `alerts/` watches, `phorge/` and
`reads/` are shared); every module is named in one place, the module map of docs/develop.md ("The module
map"), which tests/unit/test_layout.py holds to the tree.
"""
