"""gorge-webhook for Django: delivers Phorge's Herald webhooks from Phorge's own queue.

The folders are the processes:

  phorge/    Phorge's values and rules, shared by both: rows and value domains, the due and breaker rules,
             the exact bytes and signature, its SSRF rules, its settings (and the CA bundle PHP uses,
             cabundle.py), reads of its other databases
  worker/    `manage.py deliver_webhooks`: the loop, scheduling, the queue window, one hook's job and its
             results, the only SQL that writes Phorge's table (store.py), the HTTP transport (through
             libcurl, as PHP's, curl.py; through an outbound proxy, proxy.py), the attempt log, requeue,
             the operators' actions carried out (actions.py); its parts named and put together in
             parts.py, their in-memory twins in twins.py
  reads/     the reads the pages, the JSON and the alert watcher share (selectors); start no process
  web/       gunicorn: pages, JSON diagnostics, probes and web metrics over reads/, the operators' forms
             (written as actions for a worker to carry out); never imports worker/ or alerts/, and
             alerts/ never imports web/ or worker/ (tests/unit/test_layout.py)
  records/   Django's own tables: heartbeats, the attempt log, requeue notices, holds, operators' actions
  alerts/    `manage.py watch_webhooks` (or inside deliver_webhooks): conditions, and the channels: e-mail,
             a chat webhook, Apprise URLs, incident tasks in Phorge through Conduit
  phorge_auth/  Sign in with Phorge (Phorge's OAuth server)

At the root: Django's discovery points (apps, models, admin, urls, checks, management/, templatetags/),
the settings (config.py; the CA bundle's and the proxy's in egress.py) and what both processes share
(state.py, logformat.py, terminal.py, grants.py, requeue_rules.py).
"""
