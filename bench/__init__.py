"""`make bench`: throughput, latency, history and memory figures of deliver_webhooks (see bench/run.py)."""
