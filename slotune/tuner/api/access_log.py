"""Secrets out of the API's access log: query values whose names say secret are masked.

uvicorn's access log (the ``uvicorn.access`` logger) prints each request's path with its
query string as it came; a client that put a token in the URL (``?token=…``, as some
tools do for lack of a header) would have it written to every log the server keeps. The
filter masks the value of any query parameter whose name reads as a secret (the names
the engines' redaction knows, :data:`slotune.workers.engines.redact.SECRET_NAME`, and a few of
the web's own: ``key``, ``auth``, ``sig``) and leaves the rest of the line alone. It is
installed on the logger by :func:`slotune.tuner.api.app.create_app`, so it holds whichever way
the app is served (``slotune api``, ``uvicorn --factory``).
"""

from __future__ import annotations

import logging
from urllib.parse import unquote_plus

from slotune.workers.engines.redact import REDACTED, SECRET_NAME

__all__ = ["ACCESS_LOGGER", "RedactQuerySecrets", "install_access_log_redaction",
           "redact_query_secrets"]

ACCESS_LOGGER = "uvicorn.access"
_WEB_SECRET_NAMES = frozenset({"key", "auth", "sig", "signature", "code"})
_PATH_ARG = 2
"""uvicorn's access record args: (client, method, path with query, HTTP version, status)."""


def redact_query_secrets(path: str) -> str:
    """``path`` with the value of each secret-named query parameter replaced."""
    base, question, query = path.partition("?")
    if not question:
        return path
    query, hash_, fragment = query.partition("#")
    parts = []
    for part in query.split("&"):
        name, equals, _ = part.partition("=")
        plain = unquote_plus(name)
        if equals and (SECRET_NAME.search(plain) or plain.lower() in _WEB_SECRET_NAMES):
            part = f"{name}={REDACTED}"
        parts.append(part)
    return f"{base}?{'&'.join(parts)}{hash_}{fragment}"


class RedactQuerySecrets(logging.Filter):
    """Masks secret query values in uvicorn's access records (the record passes on)."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) > _PATH_ARG:
            path = args[_PATH_ARG]
            if isinstance(path, str):
                record.args = (*args[:_PATH_ARG], redact_query_secrets(path),
                               *args[_PATH_ARG + 1:])
        return True


def install_access_log_redaction() -> None:
    """Put the filter on the access logger, once (uvicorn's logging setup keeps it)."""
    logger = logging.getLogger(ACCESS_LOGGER)
    if not any(isinstance(f, RedactQuerySecrets) for f in logger.filters):
        logger.addFilter(RedactQuerySecrets())
