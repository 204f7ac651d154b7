# check=skip=SecretsUsedInArgOrEnv
# (the only such ARG is a throwaway value for collectstatic, never kept in the image's environment)
#
# One image, two processes (see docs/operate/install.md):
#   web:    the default command, gunicorn on :8000 (dashboard, admin, JSON diagnostics, /healthz, /readyz)
#   worker: docker run ... IMAGE python manage.py deliver_webhooks --metrics-port 9100
#           with GORGE_HEALTHCHECK_URL=http://127.0.0.1:9100/metrics

ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# Debian's packages move with security updates; pinning their versions would break rebuilds.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends build-essential libmariadb-dev libcurl4-openssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
COPY requirements.txt /wheels/requirements.txt
# mysqlclient has no Linux wheel: build it here, against the MariaDB client headers; pycurl against the
# system's libcurl (requirements.txt says why).
RUN pip wheel --no-cache-dir --wheel-dir /wheels -r /wheels/requirements.txt

FROM ${PYTHON_IMAGE} AS runtime
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    WEB_CONCURRENCY=2 \
    GORGE_HEALTHCHECK_URL=http://127.0.0.1:8000/healthz
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends libmariadb3 libcurl4 ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && groupadd --system --gid 10001 gorge \
    && useradd --system --uid 10001 --gid gorge --home-dir /app --no-create-home --shell /usr/sbin/nologin gorge
# The wheels are mounted, not copied, so they never become a layer of the runtime image. They are installed
# by file: requirements.txt refuses pycurl's binary wheels, this one included.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links=/wheels /wheels/*.whl

WORKDIR /app
COPY manage.py ./
# The version the processes report is read from here (webhook_delivery/version.py).
COPY pyproject.toml ./
COPY gorge_site/ gorge_site/
COPY webhook_delivery/ webhook_delivery/
# The code stays root-owned (read-only for the service); only var/ (the embedded SQLite default) is writable.
# collectstatic imports the settings, which want a SECRET_KEY: a throwaway, visible only to this RUN.
# hadolint ignore=DL3064
ARG COLLECTSTATIC_SECRET_KEY=collectstatic-only-not-a-secret
RUN SECRET_KEY="${COLLECTSTATIC_SECRET_KEY}" GORGE_ENV_FILE=/dev/null python manage.py collectstatic --noinput \
    && mkdir -p /app/var \
    && chown gorge:gorge /app/var

USER 10001:10001
EXPOSE 8000
# No curl in the slim image. The Host header is the first ALLOWED_HOSTS entry so Django accepts it.
HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import os, urllib.request as r; h = os.environ.get('ALLOWED_HOSTS', '').split(',')[0].strip().lstrip('*.') or 'localhost'; r.urlopen(r.Request(os.environ['GORGE_HEALTHCHECK_URL'], headers={'Host': h}), timeout=4)"]
# Access lines carry the path without its query string: the API accepts ?token=, which must never be logged.
# No control socket (it would go under $HOME, the root-owned /app) and worker heartbeats in /dev/shm, so the
# web process starts cleanly on a read-only root filesystem.
CMD ["gunicorn", "gorge_site.wsgi:application", "--bind", "0.0.0.0:8000", "--no-control-socket", "--worker-tmp-dir", "/dev/shm", "--access-logfile", "-", "--access-logformat", "%(h)s %(t)s \"%(m)s %(U)s\" %(s)s %(B)s %(L)s"]
