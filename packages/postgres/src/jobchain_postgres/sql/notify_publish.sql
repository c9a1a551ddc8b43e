-- notify_publish: send one notification; inside a transaction it is delivered at commit.
SELECT pg_notify(%(channel)s, %(payload)s)
