"""jobchain for synchronous code: start and read chains without an event loop.

::

    import jobchain.sync

    chains = jobchain.sync.connect("postgresql://app@db/app", job_types=registry)
    with chains.transaction(connection=conn) as tx:   # your psycopg / sqlite3 / SQLAlchemy object
        chains.start_chain(tx, send_email, SendEmail(to="a@example.com"))
    conn.commit()
    tx.flush()  # psycopg and sqlite3 only: jobchain cannot see their commit

The state backend's synchronous adapter runs the async client's own code on a synchronous
driver (see :mod:`jobchain.sync.drive`): same validation, same SQL, same typed errors.
"""

from jobchain.sync.client import SyncClient, connect
from jobchain.sync.drive import SyncWiringError
from jobchain.sync.transaction import SyncTransaction

__all__ = ["SyncClient", "SyncTransaction", "SyncWiringError", "connect"]
