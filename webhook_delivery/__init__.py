"""gorge-webhook for Django: delivers Phorge's Herald webhooks from Phorge's own queue.

Module map, by process.

Worker side (`manage.py deliver_webhooks`):
  worker.py      the main loop: poll the window, schedule hooks by lane, signals, heartbeat
  window.py      the queue window: due requests held within bounds, refilled by index as they drain
  job.py         one hook's turn on a delivery thread: lock, breaker, claim, deliver, write
  store.py       the only SQL that writes Phorge's table: claims and guarded result writes (and the reads)
  sessions.py    the connections a worker holds: a shared pool and the session holding the hook locks
  dispatcher.py  one processing in Phorge's check order, no database
  transport.py, netguard.py   one HTTP attempt with Phorge's SSRF rules, pinned addresses, one deadline
  payload.py, phpjson.py, outcomes.py, locks.py   pure: Phorge's bytes, values and lock names
  phorge_lookups.py   read-only views into Phorge's other databases (objects, settings, PHP worker)
  metrics.py     the worker's Prometheus metrics

Web side (gunicorn: dashboard, admin, JSON diagnostics, probes):
  selectors.py   every read the pages do; views.py, api.py, admin.py, web_metrics.py, templatetags/

Shared:
  herald.py      Phorge's data as values: rows, value domains, the due and breaker rules in Python and SQL
  state.py       typed contracts between processes (heartbeat, PHP guard)
  config.py, checks.py, logformat.py, models.py, grants.py, sql/ (Phorge's DDL), status/ (heartbeats),
  demo/ (`manage.py demo`), management/commands/
"""
