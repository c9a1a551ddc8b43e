"""Option help shared by the commands that open backends, so they read alike."""

STATE_URL_HELP = "State backend URL (default: $JOBCHAIN_STATE_URL, else sqlite:///jobchain.db)."
NOTIFY_URL_HELP = "Notify backend URL or 'none' (default: $JOBCHAIN_NOTIFY_URL, else none)."
