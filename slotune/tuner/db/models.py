"""slotune's tables (SQLAlchemy 2.0 typed models) and the ``best_config_per_workload`` view.

The schema is owned by the Alembic migrations in ``migrations/``; these models describe
it for queries, and a test checks the two agree on both backends. JSON columns are
``JSON`` on SQLite and ``JSONB`` on Postgres (comparable, indexable); timestamps are
stored in UTC and always come back timezone-aware.

Optuna keeps its own tables in the same database, among them ``studies`` and
``trials``; ours are named so they never clash (``sweep_trials``, not ``trials``).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Literal, get_args

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Dialect,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    TypeDecorator,
    UniqueConstraint,
)
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeEngine

from slotune.workers.engines.redact import redact_record

__all__ = [
    "BEST_CONFIG_VIEW",
    "NO_PASSING_VIEW",
    "OUR_TABLES",
    "SWEEP_MODES",
    "SWEEP_STATUSES",
    "TERMINAL_SWEEP_STATUSES",
    "TRIAL_ROLES",
    "TRIAL_STATUSES",
    "UNFINISHED_TRIAL_STATUSES",
    "VERDICTS",
    "Base",
    "ExperimentCardRow",
    "JSONType",
    "RecordJSON",
    "Sweep",
    "SweepStatus",
    "SweepTrial",
    "SweepTrialStatus",
    "TrialRole",
    "UTCDateTime",
    "Verdict",
    "WorkloadRow",
    "best_config_view",
    "no_passing_view",
    "utcnow",
]

# The status vocabularies, once: the typed names and the tuples the CHECK constraints,
# the store and the API are built from.
SweepStatus = Literal["queued", "running", "done", "failed", "cancelled"]
SweepTrialStatus = Literal["pending", "running", "ok", "infeasible", "failed", "lost"]
"""A sweep's trial: waiting or running, then a TrialResult's status, or lost with its worker."""
TrialRole = Literal["search", "repeat", "baseline"]
"""What a trial row is for: an Optuna trial of the search, a confirmation re-run of one,
or the lossless baseline the sweep's quality gate compares answers with."""
Verdict = Literal["supported", "rejected", "inconclusive"]
SWEEP_STATUSES: tuple[SweepStatus, ...] = get_args(SweepStatus)
TERMINAL_SWEEP_STATUSES: tuple[SweepStatus, ...] = ("done", "failed", "cancelled")
SWEEP_MODES = ("goodput", "capacity")
TRIAL_STATUSES: tuple[SweepTrialStatus, ...] = get_args(SweepTrialStatus)
TRIAL_ROLES: tuple[TrialRole, ...] = get_args(TrialRole)
UNFINISHED_TRIAL_STATUSES: tuple[SweepTrialStatus, ...] = ("pending", "running")
VERDICTS: tuple[Verdict, ...] = get_args(Verdict)

class RecordJSON(TypeDecorator[Any]):
    """A JSON column (JSONB on Postgres, JSON text elsewhere) whose values are redacted on
    the way in (:func:`slotune.workers.engines.redact.redact_record`): the one choke point every
    record slotune writes passes, so a secret engine argument that reached a space, a
    spec, a flag set or an argv is stored as ``***`` and no read path can show it."""

    impl = JSON
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(JSONB() if dialect.name == "postgresql" else JSON())

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        return redact_record(value)


JSONType = RecordJSON()
"""Portable JSON column type: JSONB on Postgres, JSON (text) elsewhere; redacted as written."""


def utcnow() -> datetime:
    """This host's time: only a default for rows made outside the store, which writes
    every stored time by the database's clock (:func:`slotune.tuner.db.session.db_now`)."""
    return datetime.now(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp stored in UTC that always reads back timezone-aware.

    SQLite has no time zones and returns naive datetimes; this makes both backends
    hand out the same kind of value, so comparisons and JSON dumps agree.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError(f"naive datetime {value!r}: pass a timezone-aware one")
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _one_of(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(v) for v in values)})"


# Named constraints, so later migrations (and SQLite batch mode) can refer to them.
_NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=_NAMING)


class WorkloadRow(Base):
    """A named traffic shape (``slotune.workers.contracts.Workload`` as JSON)."""

    __tablename__ = "workloads"

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


class Sweep(Base):
    """One search: a space, a workload, an SLO, a strategy, a budget and its progress."""

    __tablename__ = "sweeps"
    __table_args__ = (
        CheckConstraint(_one_of("status", SWEEP_STATUSES), name="status"),
        CheckConstraint(_one_of("mode", SWEEP_MODES), name="mode"),
        Index("ix_sweeps_status_created_at", "status", "created_at"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(200))
    workload_id: Mapped[int] = mapped_column(ForeignKey("workloads.id"), index=True)
    space: Mapped[dict[str, Any]] = mapped_column(JSONType)
    slo: Mapped[dict[str, Any]] = mapped_column(JSONType)
    slo_key: Mapped[str] = mapped_column(String(200))
    """Canonical JSON text of ``slo`` (sorted keys): the view groups by it."""
    model: Mapped[str] = mapped_column(String(200))
    gpu: Mapped[str] = mapped_column(String(100))
    strategy: Mapped[str] = mapped_column(String(50))
    mode: Mapped[str] = mapped_column(String(16), default="goodput")
    status: Mapped[str] = mapped_column(String(16), default="queued")
    budget: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    """What the sweep may spend and how it runs its trials (``SweepBudget``)."""
    seed: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """The strategy's sampler seed (Optuna's samplers take 0 … 2**32 - 1)."""
    progress: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    owner: Mapped[str | None] = mapped_column(String(200))
    """Who submitted the sweep."""
    claimed_by: Mapped[str | None] = mapped_column(String(200))
    """The coordinator running it."""
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    """Last sign of life of ``claimed_by``; one that another coordinator has watched stand
    still for the stale window lets it take over (:mod:`slotune.tuner.db.lease_watch`)."""
    lease_epoch: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """How many times the sweep was claimed; the current holder's writes carry this value
    (a :class:`~slotune.tuner.db.records.Lease`) and are refused once a later claim raised it."""
    executor: Mapped[dict[str, Any] | None] = mapped_column(JSONType, nullable=True)
    """Where its trials run, ``{"kind": "ray" | "virtual", "gpus": N}``; None until the
    first claim by a coordinator (then any executor may run it)."""
    optuna_study_name: Mapped[str | None] = mapped_column(String(200), unique=True)
    stop_reason: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    row_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Bumped by the database on every update (migration 0011): the read cache's change key."""


class SweepTrial(Base):
    """One attempt at one Optuna trial of a sweep: what ran, where, and what it learned."""

    __tablename__ = "sweep_trials"
    __table_args__ = (
        UniqueConstraint("sweep_id", "role", "number", "repeat", "attempt"),
        CheckConstraint(_one_of("status", TRIAL_STATUSES), name="status"),
        CheckConstraint(_one_of("role", TRIAL_ROLES), name="role"),
        CheckConstraint("attempt >= 1", name="attempt"),
        Index("ix_sweep_trials_sweep_id_status", "sweep_id", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    role: Mapped[str] = mapped_column(String(16), default="search", server_default="search")
    """:data:`TrialRole`: only ``search`` rows are counted as configurations (views,
    planner, study); the others are boots the sweep paid for."""
    number: Mapped[int] = mapped_column(Integer)
    """The Optuna trial number (a repeat carries its trial's); a baseline's ordinal."""
    repeat: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Which confirmation re-run a ``repeat`` row is (from 1); 0 for the others."""
    repeat_of: Mapped[int | None] = mapped_column(
        ForeignKey("sweep_trials.id", ondelete="CASCADE"))
    """The search trial a ``repeat`` row re-runs."""
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    params: Mapped[dict[str, Any]] = mapped_column(JSONType)
    """The sampled knob values (what Optuna re-enqueues)."""
    config: Mapped[dict[str, Any]] = mapped_column(JSONType)
    """The full engine configuration: fixed engine args overridden by ``params``."""
    spec: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    status: Mapped[str] = mapped_column(String(16), default="running")
    failure_class: Mapped[str | None] = mapped_column(String(32))
    objective: Mapped[float | None] = mapped_column(Float)
    capacity: Mapped[float | None] = mapped_column(Float)
    """Capacity mode: what one replica carries under the SLO (req/s), the centre of
    ``capacity_low`` … ``capacity_high``; a confirmed configuration's search row carries
    its confirmation's interval. Rows stored before 0010: the highest rate that held."""
    capacity_low: Mapped[float | None] = mapped_column(Float)
    """The highest rate shown to pass (what a fleet is sized from)."""
    capacity_high: Mapped[float | None] = mapped_column(Float)
    """The lowest rate shown to fail (None: the search's ceiling passed, or unknown)."""
    gpus: Mapped[int] = mapped_column(Integer, default=1, server_default="1")
    """Devices one replica of ``config`` occupies (tensor × pipeline × data parallel size)."""
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    diagnosis: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    timings: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    confirmed: Mapped[bool] = mapped_column(Boolean, default=False)
    repeats: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    """Confirmation re-runs a confirmed trial held up in."""
    engine: Mapped[str | None] = mapped_column(String(16))
    """``vllm`` or ``sim``, from the trial's spec."""
    engine_version: Mapped[str | None] = mapped_column(String(64))
    """What the engine reported (``GET /version``) when the trial ran."""
    gpu_driver: Mapped[str | None] = mapped_column(String(64))
    model_revision: Mapped[str | None] = mapped_column(String(128))
    headroom: Mapped[float | None] = mapped_column(Float)
    """The worst observed/target SLO ratio of the trial (< 1: it met the SLO)."""
    worker: Mapped[str | None] = mapped_column(String(200))
    node: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    heartbeat_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    row_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Bumped by the database on every update (migration 0011): the read cache's change key."""


class ExperimentCardRow(Base):
    """One step of a guided sweep: symptom → one-variable experiment → verdict → rollback."""

    __tablename__ = "experiment_cards"
    __table_args__ = (
        UniqueConstraint("sweep_id", "step"),
        CheckConstraint(f"verdict IS NULL OR {_one_of('verdict', VERDICTS)}", name="verdict"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sweep_id: Mapped[int] = mapped_column(ForeignKey("sweeps.id", ondelete="CASCADE"))
    step: Mapped[int] = mapped_column(Integer)
    symptom: Mapped[str] = mapped_column(Text)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSONType, default=dict)
    hypothesis: Mapped[str] = mapped_column(Text)
    variable: Mapped[str] = mapped_column(String(200))
    values: Mapped[list[Any]] = mapped_column(JSONType, default=list)
    expected_direction: Mapped[str] = mapped_column(Text)
    controls: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    """What was held fixed: model, GPU, workload and seed, engine and version, the other
    knobs, the trial order."""
    stop_condition: Mapped[list[str] | None] = mapped_column(JSONType)
    """The rules that end a value's run at once, each a sentence."""
    result: Mapped[dict[str, Any] | None] = mapped_column(JSONType)
    verdict: Mapped[str | None] = mapped_column(String(16))
    """None while the experiment runs."""
    rollback: Mapped[Any | None] = mapped_column(JSONType)
    """What to return to if the hypothesis is rejected (a config, or a sentence)."""
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    row_version: Mapped[int] = mapped_column(BigInteger, default=0, server_default="0")
    """Bumped by the database on every update (migration 0011): the read cache's change key."""


OUR_TABLES = tuple(Base.metadata.tables)
"""Our table names: what our migrations own (anything else, e.g. Optuna's, is left alone)."""

BEST_CONFIG_VIEW = "best_config_per_workload"

# The view is created by the migrations (SQL in migrations/versions); this Table only
# describes its columns for reading. It lives in its own MetaData so nothing ever
# creates it as a table.
def _view_group_columns() -> tuple[Column[Any], ...]:
    """What both views group by: one (workload, model, gpu, slo) a row."""
    return (Column("workload", String), Column("model", String), Column("gpu", String),
            Column("slo", String))


best_config_view = Table(
    BEST_CONFIG_VIEW,
    MetaData(),
    *_view_group_columns(),
    Column("config", JSONType),
    Column("objective", Float),
    Column("capacity", Float),
    Column("capacity_low", Float),
    Column("capacity_high", Float),
    Column("gpus", Integer),
    Column("capacity_per_gpu", Float),
    Column("confirmed", Boolean),
    Column("trial_id", Integer),
    Column("measured_at", UTCDateTime),
    Column("engine", String),
    Column("engine_version", String),
    Column("gpu_driver", String),
    Column("model_revision", String),
    Column("repeats", Integer),
    Column("sweep_id", Integer),
    Column("number", Integer),
    Column("stale", Boolean),
)

NO_PASSING_VIEW = "workloads_without_passing_config"

no_passing_view = Table(
    NO_PASSING_VIEW,
    MetaData(),
    *_view_group_columns(),
    Column("request_rate", Float),
    Column("closest", Integer),
    Column("closest_config", JSONType),
    Column("closest_ratio", Float),
    Column("trials", Integer),
    Column("measured_at", UTCDateTime),
)
