"""Service settings from the environment: one nested, cached :func:`get_settings`.

The same code runs on a laptop (SQLite file, local Ray) and in production (Postgres,
a Ray cluster); only these settings change. Names follow the ecosystem's conventions
where one exists (``DATABASE_URL``, ``RAY_ADDRESS``) and carry a ``SLOTUNE_`` prefix
otherwise. Secrets are :class:`~pydantic.SecretStr` so they never reach a log or a repr;
database URLs go through :func:`redact_url` before they are shown anywhere.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterator, Mapping
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import (
    AliasChoices,
    Field,
    SecretStr,
    StringConstraints,
    TypeAdapter,
    ValidationError,
    field_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

# Where the embedded database and reports live; the rule is shared with the workers' engine
# caches, so it lives with them.
from slotune.workers.data_dir import default_data_dir
from slotune.workers.trust import (
    DATA_DIRS_ENV,
    ENGINE_BINARIES_ENV,
    QUALITY_COMMANDS_ENV,
    REGISTERED_NAME,
    RegisteredCommand,
    Trust,
)

__all__ = [
    "DEFAULT_GPU_PRICES",
    "GPU_PRICE_MAX",
    "ApiSettings",
    "DatabaseSettings",
    "GpuName",
    "GpuPrice",
    "MissingSecret",
    "PlannerSettings",
    "RaySettings",
    "Settings",
    "TrustSettings",
    "database_digest",
    "default_data_dir",
    "get_settings",
    "gpu_price_table",
    "normalize_database_url",
    "redact_url",
]

# Postgres URLs without a driver mean psycopg2 to SQLAlchemy, which we do not ship:
# psycopg 3 is the driver, for our engine and for Optuna's alike.
_PG_DRIVERLESS = {"postgres", "postgresql"}
_PG_DRIVER = "postgresql+psycopg"
# libpq also accepts the password as a query parameter; hide it there too.
_SECRET_QUERY = re.compile(r"([?&](?:ssl)?password=)[^&]*", re.IGNORECASE)


class MissingSecret(RuntimeError):
    """A secret the service needs to start was not configured."""


def normalize_database_url(url: str) -> str:
    """The URL SQLAlchemy and Optuna should use: ``postgresql://`` → psycopg 3.

    Other URLs (SQLite, an explicit driver) are returned unchanged. Raises
    ``ValueError`` (with the URL redacted) when the text is not a database URL.
    """
    try:
        parsed = make_url(url)
    except ArgumentError:
        raise ValueError(f"not a database URL: {redact_url(url)!r}") from None
    if parsed.drivername in _PG_DRIVERLESS:
        return parsed.set(drivername=_PG_DRIVER).render_as_string(hide_password=False)
    return url


def redact_url(url: object) -> str:
    """``url`` with its password (user-info or query parameter) replaced by ``***``.

    Safe on anything: text that does not parse as a URL still has any
    ``scheme://user:secret@`` part masked.
    """
    text = str(url)
    try:
        parsed = make_url(text)
    except ArgumentError:
        return re.sub(r"(://[^:/@]*:)[^@]*@", r"\1***@", text)
    shown = parsed.render_as_string(hide_password=True)
    return _SECRET_QUERY.sub(r"\1***", shown)


def database_digest(url: str) -> str:
    """A short, stable name for the database at ``url`` that says nothing of it: the
    first 12 hex digits of the SHA-256 of its redacted URL (password gone; the driver,
    ``postgres://`` or ``postgresql+psycopg://``, as the engine sees it; a SQLite file by
    its absolute path, so two spellings of one file agree). For what one database owns
    on disk beside others' (its reports)."""
    text = redact_url(url)
    try:
        parsed = make_url(normalize_database_url(url))
    except ValueError:
        pass
    else:
        database = parsed.database
        if (parsed.get_backend_name() == "sqlite" and database and database != ":memory:"
                and not database.startswith("file:")):
            parsed = parsed.set(database=os.path.abspath(os.path.expanduser(database)))
        text = redact_url(parsed.render_as_string(hide_password=False))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


class DatabaseSettings(BaseSettings):
    """Where slotune (and Optuna, in the same database) keeps its state."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    url: str = Field(
        default_factory=lambda: f"sqlite:///{default_data_dir() / 'slotune.db'}",
        validation_alias=AliasChoices("DATABASE_URL", "SLOTUNE_DATABASE_URL", "url"),
    )
    """As given; :attr:`sqlalchemy_url` is what engines are built from."""
    echo: bool = Field(False, validation_alias=AliasChoices("SLOTUNE_DATABASE_ECHO", "echo"))

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        # A URL may carry a password: reprs (and so logs) only ever see it redacted.
        for name, value in super().__repr_args__():
            yield name, (redact_url(value) if name == "url" else value)

    @field_validator("url")
    @classmethod
    def _parses(cls, value: str) -> str:
        normalize_database_url(value)  # fail at start, not at the first query
        return value

    @property
    def sqlalchemy_url(self) -> str:
        return normalize_database_url(self.url)

    @property
    def optuna_url(self) -> str:
        """The URL for ``optuna.storages.RDBStorage``, ``optuna studies``, optuna-dashboard."""
        return normalize_database_url(self.url)

    @property
    def redacted_url(self) -> str:
        return redact_url(self.url)


class RaySettings(BaseSettings):
    """Ray: ``None`` starts a local Ray; ``ray://host:10001`` or ``auto`` joins a cluster."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    address: str | None = Field(
        None, validation_alias=AliasChoices("RAY_ADDRESS", "SLOTUNE_RAY_ADDRESS", "address")
    )


class ApiSettings(BaseSettings):
    """The REST API."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    token: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SLOTUNE_API_TOKEN", "token")
    )
    """Bearer token required on every write."""
    read_token: SecretStr | None = Field(
        None, validation_alias=AliasChoices("SLOTUNE_API_READ_TOKEN", "read_token")
    )
    """When set, reads need this token (or the write token); unset, reads are open."""
    host: str = Field("127.0.0.1", validation_alias=AliasChoices("SLOTUNE_API_HOST", "host"))
    port: int = Field(8080, ge=0, le=65535,
                      validation_alias=AliasChoices("SLOTUNE_API_PORT", "port"))
    max_body_bytes: int = Field(
        1 << 20, ge=1, validation_alias=AliasChoices("SLOTUNE_API_MAX_BODY_BYTES",
                                                    "max_body_bytes"))
    """Request bodies above this size are refused (HTTP 413) before they are parsed."""

    @property
    def write_secret(self) -> SecretStr | None:
        """The write token, or None when unset or blank (writes are then refused)."""
        return _non_blank(self.token)

    @property
    def read_secret(self) -> SecretStr | None:
        """The read token, or None when unset or blank (reads are then open)."""
        return _non_blank(self.read_token)

    def require_token(self) -> SecretStr:
        """The token, or :class:`MissingSecret` when unset or blank (refuse to start)."""
        if self.token is None or not self.token.get_secret_value().strip():
            raise MissingSecret("SLOTUNE_API_TOKEN is not set; the API refuses to start "
                                "without a bearer token for writes")
        return self.token


def _non_blank(secret: SecretStr | None) -> SecretStr | None:
    # An empty SLOTUNE_API_TOKEN= in a compose file means "not configured", never
    # "the empty string opens every door".
    if secret is None or not secret.get_secret_value().strip():
        return None
    return secret


GPU_PRICE_MAX = 1e6
"""The most a GPU-hour may cost (USD): keeps every cost a finite number in JSON."""

# A GPU's name as sweeps store it; the same rule as the API's names (no NUL: Postgres
# text cannot hold one).
GpuName = Annotated[str, StringConstraints(min_length=1, max_length=200, pattern=r"^[^\x00]+$")]
GpuPrice = Annotated[float, Field(ge=0, le=GPU_PRICE_MAX, allow_inf_nan=False, strict=True)]
"""USD per GPU-hour: a finite number, 0 … :data:`GPU_PRICE_MAX` (not text, not a bool)."""

# Rough on-demand list prices of GPU clouds (USD per GPU-hour, 2025) for the simulator's
# catalogue, so a plan has a cost out of the box. They are placeholders, not quotes: set
# SLOTUNE_GPU_PRICES (or a request's gpu_prices) to what you actually pay. "cpu" (vLLM's
# CPU build) is deliberately unpriced.
DEFAULT_GPU_PRICES: Mapping[str, float] = {
    "a100-80g": 1.8,
    "h100-sxm": 3.0,
    "h200": 3.8,
    "l40s": 1.0,
    "rtx4090": 0.5,
}

_PRICE_TABLE: TypeAdapter[dict[str, float]] = TypeAdapter(dict[GpuName, GpuPrice])
_PRICE_FORM = ('a JSON object of GPU name → USD per GPU-hour (a number from 0 to '
               f'{GPU_PRICE_MAX:g}), e.g. \'{{"h100-sxm": 3.0, "l40s": 1.0}}\'')


def gpu_price_table(value: object, source: str, form: str = _PRICE_FORM) -> dict[str, float]:
    """``value`` (JSON text or a mapping) as a price table, or ``ValueError`` naming
    ``source`` (where the value came from) and ``form``, the form it takes there."""
    try:
        if isinstance(value, str | bytes):
            return _PRICE_TABLE.validate_json(value)
        return _PRICE_TABLE.validate_python(value)
    except ValidationError as exc:
        problems = "; ".join(_problem(e["loc"], e["msg"])
                             for e in exc.errors(include_url=False, include_input=False))
        raise ValueError(f"{source}: expected {form}; {problems}") from None


def _problem(loc: tuple[int | str, ...], msg: str) -> str:
    if not loc:
        return msg
    if loc[-1] == "[key]":
        return f"GPU name {loc[0]!r}: {msg}"
    return f"price of {loc[0]!r}: {msg}"


class PlannerSettings(BaseSettings):
    """The capacity planner: what a GPU-hour costs, so plans compare by cost."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    # NoDecode: the validator reads the JSON itself, so a bad value is refused with the
    # variable's name and the form it takes, not pydantic-settings' generic parse error.
    gpu_prices: Annotated[dict[str, float], NoDecode] = Field(
        default_factory=dict, validation_alias=AliasChoices("SLOTUNE_GPU_PRICES", "gpu_prices"))
    """:data:`DEFAULT_GPU_PRICES` with ``SLOTUNE_GPU_PRICES`` merged over them, per name."""

    @field_validator("gpu_prices", mode="before")
    @classmethod
    def _over_defaults(cls, value: object) -> dict[str, float]:
        return {**DEFAULT_GPU_PRICES, **gpu_price_table(value, "SLOTUNE_GPU_PRICES")}

    def prices(self, overrides: Mapping[str, float] | None = None) -> dict[str, float]:
        """The price table a plan uses: these settings, ``overrides`` (a request's
        ``gpu_prices``) winning per GPU name."""
        return {**self.gpu_prices, **(overrides or {})}


_BINARIES = TypeAdapter(dict[str, str])
_COMMANDS = TypeAdapter(dict[str, RegisteredCommand])
_DIRS = TypeAdapter(list[str])


class TrustSettings(BaseSettings):
    """What the operator lets an API client name (:mod:`slotune.workers.trust`): engine binaries
    and quality commands by name, files inside data directories. Each is a JSON value of
    its environment variable; unset, a client can name none of them."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    # NoDecode: each validator reads its JSON itself, to name its variable when it is bad.
    engine_binaries: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices(ENGINE_BINARIES_ENV, "engine_binaries"))
    """Name → the engine executable on the workers, ``{"vllm-0.32": "/opt/vllm/bin/vllm"}``."""
    quality_commands: Annotated[dict[str, RegisteredCommand], NoDecode] = Field(
        default_factory=dict,
        validation_alias=AliasChoices(QUALITY_COMMANDS_ENV, "quality_commands"))
    """Name → ``{"argv": [...], "timeout_s": 3600}``, run on the worker against the engine."""
    data_dirs: Annotated[tuple[Path, ...], NoDecode] = Field(
        default=(), validation_alias=AliasChoices(DATA_DIRS_ENV, "data_dirs"))
    """Absolute directories whose files (traces, conversations, device files, model
    directories) a client may name by relative path: a JSON list, or paths joined by
    ``:``."""

    @field_validator("engine_binaries", mode="before")
    @classmethod
    def _binaries(cls, value: object) -> dict[str, str]:
        table = _registry(_BINARIES, value, ENGINE_BINARIES_ENV,
                          '\'{"vllm-main": "/opt/vllm/bin/vllm"}\'')
        for name, path in table.items():
            if not path.strip() or "\x00" in path:
                raise ValueError(f"{ENGINE_BINARIES_ENV}: {name!r} needs an executable's path")
        return table

    @field_validator("quality_commands", mode="before")
    @classmethod
    def _commands(cls, value: object) -> dict[str, RegisteredCommand]:
        return _registry(_COMMANDS, value, QUALITY_COMMANDS_ENV,
                         '\'{"mmlu": {"argv": ["lm_eval", "--model", "local-completions", '
                         '"--model_args", "base_url={base_url}/v1/completions"], '
                         '"timeout_s": 3600}}\'')

    @field_validator("data_dirs", mode="before")
    @classmethod
    def _dirs(cls, value: object) -> tuple[Path, ...]:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                try:
                    value = _DIRS.validate_json(text)
                except ValidationError:
                    raise ValueError(f"{DATA_DIRS_ENV}: expected a JSON list of absolute "
                                     "directories, or directories joined by ':'") from None
            else:
                value = [part for part in text.split(os.pathsep) if part.strip()]
        if not isinstance(value, list | tuple):
            raise ValueError(f"{DATA_DIRS_ENV}: expected a list of absolute directories")
        dirs = []
        for item in value:
            path = Path(str(item)).expanduser()
            if not path.is_absolute():
                raise ValueError(f"{DATA_DIRS_ENV}: {str(item)!r} is not an absolute "
                                 "directory")
            dirs.append(path.resolve())
        return tuple(dirs)

    def for_client(self) -> Trust:
        """What an API request may name."""
        return Trust("client", self.engine_binaries, self.quality_commands, self.data_dirs)

    def for_operator(self) -> Trust:
        """What the CLI may name: any path, and the registered names too."""
        return Trust("operator", self.engine_binaries, self.quality_commands, self.data_dirs)


_Registry = TypeVar("_Registry", bound=Mapping[str, Any])


def _registry(adapter: TypeAdapter[_Registry], value: object, env: str,
              example: str) -> _Registry:
    """``value`` (JSON text or a mapping) as a registry of names, or ``ValueError`` naming
    ``env`` and the form it takes. Blank text (``VAR=`` in a compose file) is none."""
    if isinstance(value, str) and not value.strip():
        value = {}
    try:
        table = adapter.validate_json(value) if isinstance(value, str | bytes) \
            else adapter.validate_python(value)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}"
                             for e in exc.errors(include_url=False, include_input=False))
        raise ValueError(f"{env}: expected a JSON object of name → entry, e.g. {example}; "
                         f"{problems}") from None
    bad = [name for name in table if not REGISTERED_NAME.fullmatch(name)]
    if bad:
        raise ValueError(f"{env}: {bad[0]!r} is not a name (letters, digits, '.', '_', '-'; "
                         "a name is never a path)")
    return table


class Settings(BaseSettings):
    """All of slotune's settings; each section reads its own environment variables."""

    # The prefix keeps a stray DATABASE/RAY/API variable from being read as a section.
    model_config = SettingsConfigDict(extra="ignore", env_prefix="SLOTUNE_")

    database: DatabaseSettings = Field(default_factory=DatabaseSettings)
    ray: RaySettings = Field(default_factory=RaySettings)
    api: ApiSettings = Field(default_factory=ApiSettings)
    planner: PlannerSettings = Field(default_factory=PlannerSettings)
    trust: TrustSettings = Field(default_factory=TrustSettings)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read once (tests call ``get_settings.cache_clear()``)."""
    return Settings()
