"""What the pages and the alert watcher both read: Phorge's herald tables, its settings and PHP worker, the
replica, and the alert state. Neither side imports the other; both import this."""
