"""`manage.py demo`: the delivery loop end to end on SQLite, with a signature-checking local receiver.

Nothing here runs in production. The demo creates Phorge's two herald tables in its own SQLite file
(from Phorge's MariaDB DDL, translated), never through Django migrations, and never on MySQL.
"""
