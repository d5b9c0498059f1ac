"""The contracts between slotune's control plane and its workers (pydantic, JSON-serialisable).

:class:`Workload` says what traffic looks like (dataset + arrivals + counts + seed) and
:class:`SLO` says what "fast enough" means. :class:`TrialSpec` is one configuration to
boot and measure; :class:`TrialResult` is everything a trial learned, failures included.
All are stored as JSON and compared across runs, so they are strict: unknown fields are
errors, and every error names its field.

This package is a façade: each vocabulary has its module (``workload``, ``slo``, ``engine``,
``capacity``, ``quality``, ``spec``, ``result``) and everything is importable from here, as
stored code and callers always have.
"""

from slotune.workers.contracts._base import MAX_TOKENS, RUN_ID_ALIASES
from slotune.workers.contracts.capacity import (
    MIN_RELATIVE_TOLERANCE,
    PROBE_EXTENSIONS,
    CapacitySearch,
    RankingProbes,
)
from slotune.workers.contracts.engine import (
    Device,
    EngineChoice,
    KnobValue,
    ObjectiveMode,
    TrialTimeouts,
    engine_flags,
    engine_kind,
    lift_sim_gpu,
    options_for,
)
from slotune.workers.contracts.options import EngineOptions
from slotune.workers.contracts.quality import GOLDEN_PROMPTS, CommandCheck, GoldenCheck, QualityGate
from slotune.workers.contracts.result import (
    BOOT_PHASES,
    FAILURE_CLASSES,
    INPUT_FAILURES,
    TRANSIENT_FAILURES,
    CapacityProbe,
    EngineFacts,
    FailureClass,
    PhaseTimings,
    ProbeVerdict,
    QualityVerdict,
    TailEvidence,
    TrialResult,
    TrialStatus,
)
from slotune.workers.contracts.slo import SLO, SLO_METRICS, SLOMetric
from slotune.workers.contracts.spec import TrialSpec, replica_gpus
from slotune.workers.contracts.workload import (
    FILE_DATASETS,
    Arrivals,
    CustomDataset,
    DatasetConfig,
    MooncakeTraceDataset,
    MultiTurnDataset,
    PrefixRepetitionDataset,
    RampUp,
    RandomDataset,
    ShareGPTDataset,
    ShareGPTLikeDataset,
    TraceDataset,
    TraceFields,
    Workload,
)

__all__ = [
    "BOOT_PHASES",
    "FAILURE_CLASSES",
    "FILE_DATASETS",
    "GOLDEN_PROMPTS",
    "INPUT_FAILURES",
    "MAX_TOKENS",
    "MIN_RELATIVE_TOLERANCE",
    "PROBE_EXTENSIONS",
    "RUN_ID_ALIASES",
    "SLO",
    "SLO_METRICS",
    "TRANSIENT_FAILURES",
    "Arrivals",
    "CapacityProbe",
    "CapacitySearch",
    "CommandCheck",
    "CustomDataset",
    "DatasetConfig",
    "Device",
    "EngineChoice",
    "EngineFacts",
    "EngineOptions",
    "FailureClass",
    "GoldenCheck",
    "KnobValue",
    "MooncakeTraceDataset",
    "MultiTurnDataset",
    "ObjectiveMode",
    "PhaseTimings",
    "PrefixRepetitionDataset",
    "ProbeVerdict",
    "QualityGate",
    "QualityVerdict",
    "RampUp",
    "RandomDataset",
    "RankingProbes",
    "SLOMetric",
    "ShareGPTDataset",
    "ShareGPTLikeDataset",
    "TailEvidence",
    "TraceDataset",
    "TraceFields",
    "TrialResult",
    "TrialSpec",
    "TrialStatus",
    "TrialTimeouts",
    "Workload",
    "engine_flags",
    "engine_kind",
    "lift_sim_gpu",
    "options_for",
    "replica_gpus",
]

