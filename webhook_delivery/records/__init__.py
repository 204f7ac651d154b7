"""Worker heartbeats, kept in Django's own database (never in Phorge's).

Each deliver_webhooks process writes one row every few seconds with what only it can know (claims
lost, breaker and lock states, database trouble), so the dashboard and the health JSON can show it.
"""
