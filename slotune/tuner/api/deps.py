"""Dependencies of the API's handlers: the store, the settings, and who may read or write.

``StoreDep``, ``ReadCacheDep`` and ``SettingsDep`` hand a handler what
:func:`slotune.tuner.api.app.create_app` put on ``app.state``. ``WriterDep`` guards every write
(``Authorization: Bearer <SLOTUNE_API_TOKEN>``), ``ReaderDep`` every read when
``SLOTUNE_API_READ_TOKEN`` is set. Tokens are compared with :func:`hmac.compare_digest`
(no timing oracle) and never logged or echoed back. A server without a write token
refuses writes: an open write API that queues GPU-hours of work is not a safe default.
``UniqueKeys`` refuses a JSON body that gives one key twice, as spaces and workloads in
YAML are refused (the last one would win).
"""

from __future__ import annotations

import hmac
import json
from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from slotune.tuner.api.errors import InvalidInput
from slotune.tuner.api.read_cache import ReadCache
from slotune.tuner.db.store import Store
from slotune.tuner.settings import Settings
from slotune.workers.safe_yaml import DuplicateKeyError, unique_keys

__all__ = [
    "ReadCacheDep",
    "ReaderDep",
    "SettingsDep",
    "StoreDep",
    "UniqueKeys",
    "WriterDep",
    "require_reader",
    "require_writer",
]

_bearer = HTTPBearer(
    auto_error=False,
    description="SLOTUNE_API_TOKEN for writes; SLOTUNE_API_READ_TOKEN (or the write token) "
                "for reads when a read token is configured.",
)
_Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
_CHALLENGE = {"WWW-Authenticate": "Bearer"}


def get_store(request: Request) -> Store:
    store: Store = request.app.state.store
    return store


def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def get_read_cache(request: Request) -> ReadCache:
    cache: ReadCache = request.app.state.read_cache
    return cache


StoreDep = Annotated[Store, Depends(get_store)]
ReadCacheDep = Annotated[ReadCache, Depends(get_read_cache)]
"""The read path's snapshots (:mod:`slotune.tuner.api.read_cache`): the frontier, reports, plans."""
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


def _matches(given: str, secret: SecretStr | None) -> bool:
    if secret is None:
        return False
    # Bytes, not str: compare_digest refuses non-ASCII str, and a header may carry any.
    return hmac.compare_digest(given.encode("utf-8"), secret.get_secret_value().encode("utf-8"))


def require_writer(settings: SettingsDep, credentials: _Credentials) -> None:
    """Allow the request only with the write token."""
    write = settings.api.write_secret
    if write is None:
        raise HTTPException(403, "writes are disabled: no API token is configured on the "
                                 "server; set SLOTUNE_API_TOKEN")
    if credentials is None:
        raise HTTPException(401, "this request writes and needs 'Authorization: Bearer "
                                 "<SLOTUNE_API_TOKEN>'", headers=_CHALLENGE)
    if _matches(credentials.credentials, write):
        return
    if _matches(credentials.credentials, settings.api.read_secret):
        raise HTTPException(403, "the read token cannot write; use SLOTUNE_API_TOKEN")
    raise HTTPException(401, "invalid bearer token",
                        headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


def require_reader(settings: SettingsDep, credentials: _Credentials) -> None:
    """Allow reads freely, unless a read token is configured: then it (or the write token)."""
    read = settings.api.read_secret
    if read is None:
        return
    if credentials is None:
        raise HTTPException(401, "reads need 'Authorization: Bearer <SLOTUNE_API_READ_TOKEN>' "
                                 "on this server", headers=_CHALLENGE)
    if not (_matches(credentials.credentials, read)
            or _matches(credentials.credentials, settings.api.write_secret)):
        raise HTTPException(401, "invalid bearer token",
                            headers={"WWW-Authenticate": 'Bearer error="invalid_token"'})


WriterDep = Annotated[None, Depends(require_writer)]
ReaderDep = Annotated[None, Depends(require_reader)]


async def _unique_json_keys(request: Request) -> None:
    body = await request.body()  # cached by Starlette: the route's own parse reuses it
    try:
        json.loads(body, object_pairs_hook=unique_keys)
    except DuplicateKeyError as exc:
        raise InvalidInput(["body"], str(exc), "duplicate_key") from None
    except ValueError:
        return  # not JSON at all: the body's own validation says so


UniqueKeys = Depends(_unique_json_keys)
