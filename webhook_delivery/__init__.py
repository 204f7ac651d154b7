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
  phorge_lookups.py   read-only views into Phorge's other databases (objects, PHP worker)
  phorge_config.py    Phorge's own switches: its local.json, then its config database, then its defaults
  delivery_id.py, memory.py   the opt-in webhook-id header; giving back what large requests used
  attempts.py    the attempt log: every attempt, written to Django's database off the delivery path
  metrics.py     the worker's Prometheus metrics

Recovery and operators' commands:
  requeue.py     failed requests back to the queue, through store.py; running workers told by status/notices.py
  status/holds.py   `manage.py hold_webhooks`: hooks held in Django's database, skipped by workers
  alerts/        `manage.py watch_webhooks` (or `deliver_webhooks --watch`): conditions, de-duplication,
                 e-mail and chat channels, in Django's database

Web side (gunicorn: dashboard, admin, JSON diagnostics, probes):
  selectors.py   every read of Phorge's tables and the heartbeats the pages do; history.py the attempt log's
  views.py, api.py, admin.py, web_metrics.py, templatetags/, access.py (who sees the pages), links.py
  phorge_auth/   Sign in with Phorge: Phorge's OAuth server (Authlib), accounts keyed by Phorge PHID, the
                 re-check middleware, the break-glass password rule (own migrations, Django's database)

Shared:
  herald.py      Phorge's data as values: rows, value domains, the due and breaker rules in Python and SQL
  state.py       typed contracts between processes (heartbeat, PHP guard)
  config.py, checks.py, logformat.py, terminal.py, models.py, grants.py, sql/ (Phorge's DDL), demo/ (`manage.py demo`),
  status/ (Django's own tables: heartbeats, attempt log, requeue notices), management/commands/
"""
