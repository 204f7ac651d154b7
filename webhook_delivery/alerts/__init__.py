"""Alerts: someone is told when a receiver breaks, delivery stalls, or Phorge is about to collect (or has
collected) requests that were never delivered. State lives in Django's own database (never Phorge's)."""
