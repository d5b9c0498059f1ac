"""Errors at the edge: every failure the service layer raises becomes one HTTP status here.

Handlers never catch storage or planner errors themselves; :func:`install_error_handlers`
maps them once (404 not found, 409 conflict, 422 invalid input, 503 storage unavailable or
schema missing, 500 anything else) with the reason as the body's ``detail``. A 422 always
has FastAPI's validation shape (``detail: [{loc, msg, type}]``) so clients read one shape
for every invalid input, wherever it was detected.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from sqlalchemy.exc import DataError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from slotune.tuner.db.errors import StorageError, http_status
from slotune.tuner.planning.planner import AmbiguousSlo, NothingMeasured, PlanError, SloNeverMet

__all__ = ["ERROR_RESPONSES", "ErrorOut", "InvalidInput", "install_error_handlers"]

log = logging.getLogger("slotune.api")


class ErrorOut(BaseModel):
    """Why a request was refused."""

    detail: str


class InvalidInput(Exception):
    """Input that passed schema validation but the service refused (HTTP 422)."""

    def __init__(self, loc: Sequence[str | int], msg: str, kind: str = "value_error") -> None:
        super().__init__(msg)
        self.loc, self.msg, self.kind = list(loc), msg, kind


# For route decorators: what a refusal looks like, so OpenAPI (and clients) know it.
ERROR_RESPONSES: dict[int | str, dict[str, object]] = {
    401: {"model": ErrorOut, "description": "Missing or invalid bearer token"},
    403: {"model": ErrorOut, "description": "The token may not do this, or writes are off"},
    404: {"model": ErrorOut, "description": "No such object"},
    409: {"model": ErrorOut, "description": "The object's state forbids this"},
    413: {"model": ErrorOut, "description": "Request body too large"},
    503: {"model": ErrorOut, "description": "Database unavailable or not migrated"},
}


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
    app.add_exception_handler(StorageError, _storage_error)  # type: ignore[arg-type]
    app.add_exception_handler(PlanError, _plan_error)  # type: ignore[arg-type]
    app.add_exception_handler(InvalidInput, _invalid_input)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _http_error)  # type: ignore[arg-type]


def _validation_error(_request: Request, exc: RequestValidationError) -> JSONResponse:
    """FastAPI's 422 shape, rendered from what can always be rendered.

    FastAPI's own handler echoes each error's ``input``: a NaN there cannot be written as
    JSON and a lone surrogate cannot be encoded, so the 422 became a 500 (and the broken
    response reset the connection for the next request). Only loc, msg and type go back.
    """
    detail = [{"loc": [_printable(p) for p in err.get("loc", ())],
               "msg": _printable(err.get("msg", "invalid")),
               "type": _printable(err.get("type", "value_error"))} for err in exc.errors()]
    return JSONResponse({"detail": detail}, status_code=422)


async def _http_error(request: Request, exc: HTTPException) -> Response:
    """FastAPI answers a body it cannot decode (not UTF-8) with a bare 400, and a body
    that is not JSON with a 422: both are a body that is not JSON, so both are 422."""
    if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
        return _invalid(["body"], "the body is not JSON: it is not UTF-8 text "
                        f"({exc.__cause__.reason} at byte {exc.__cause__.start})",
                        "json_invalid")
    return await http_exception_handler(request, exc)


def _printable(part: object) -> str | int:
    if isinstance(part, int) and not isinstance(part, bool):
        return part
    return str(part).encode("utf-8", "backslashreplace").decode("utf-8")


def _storage_error(_request: Request, exc: StorageError) -> JSONResponse:
    status = http_status(exc)
    if status == 503:
        log.warning("storage: %s", exc)  # messages carry redacted URLs only
        return _detail(503, str(exc), headers={"Retry-After": "5"})
    if status == 500 and isinstance(exc.__cause__, DataError):
        # The database refused a value (out of range, a NUL byte …): the client's input.
        return _invalid(["body"], f"the database refused a value: {exc}", "data_error")
    if status == 500:
        log.error("storage error: %s", exc)
        return _detail(500, f"storage error: {exc}")
    return _detail(status, str(exc))


def _plan_error(_request: Request, exc: PlanError) -> JSONResponse:
    if isinstance(exc, NothingMeasured):
        return _detail(404, str(exc))
    if isinstance(exc, AmbiguousSlo):
        return _invalid(["body", "slo"], str(exc), "ambiguous_slo")
    if isinstance(exc, SloNeverMet):
        return _invalid(["body", "workload"], str(exc), "slo_never_met")
    return _invalid(["body"], str(exc))


def _invalid_input(_request: Request, exc: InvalidInput) -> JSONResponse:
    return _invalid(exc.loc, exc.msg, exc.kind)


def _detail(status: int, detail: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


def _invalid(loc: Sequence[str | int], msg: str, kind: str = "value_error") -> JSONResponse:
    return JSONResponse({"detail": [{"loc": list(loc), "msg": msg, "type": kind}]},
                        status_code=422)
