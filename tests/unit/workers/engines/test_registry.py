"""Engines register themselves: a new one is one module in slotune/workers/engines/, its options
a model of its own, found by kind with no edit anywhere else."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pydantic import ValidationError

import slotune.workers.contracts.options as engine_options
import slotune.workers.engines as engines
from slotune.tuner.spaces import SearchSpace, SpaceError, parse_space
from slotune.workers.contracts import SLO, TrialSpec, Workload
from slotune.workers.engines import ENGINES, EngineAdapter, adapter_for, make_engine
from slotune.workers.engines.sim import SimEngine, SimOptions
from slotune.workers.engines.vllm import VllmEngine, VllmOptions

ECHO = '''
"""A test engine: what a new adapter module looks like."""
from __future__ import annotations

import sys
from typing import ClassVar

from slotune.workers.contracts.options import EngineOptions
from slotune.workers.engines.base import EngineAdapter, flag_args


class EchoOptions(EngineOptions):
    greeting: str = "hello"
    repeats: int = 1


class EchoEngine(EngineAdapter):
    kind = "echo"
    options_model = EchoOptions
    known_args: ClassVar[frozenset[str]] = frozenset({"max_num_seqs"})

    def command(self, port: int) -> list[str]:
        options = self.spec.options_of(EchoOptions)
        return [sys.executable, "-c", "pass", str(port), options.greeting,
                str(options.repeats), *flag_args(self.spec.engine_flags)]
'''

BASE = {"run_id": "t", "model": "m", "workload": Workload(), "slo": SLO(ttft=300)}


@pytest.fixture
def echo_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """``echo_engine.py`` dropped into the adapters' package (on its path), then discovered
    as the package discovers its own modules; the registries restored afterwards."""
    (tmp_path / "echo_engine.py").write_text(textwrap.dedent(ECHO))
    monkeypatch.setattr(engines, "__path__", [*engines.__path__, str(tmp_path)])
    adapters, options = dict(engines.ENGINES), dict(engine_options._REGISTRY)
    try:
        engines._import_adapters()
        yield "slotune.workers.engines.echo_engine"
    finally:
        sys.modules.pop("slotune.workers.engines.echo_engine", None)
        engines.ENGINES.clear()
        engines.ENGINES.update(adapters)
        engine_options._REGISTRY.clear()
        engine_options._REGISTRY.update(options)


def test_the_shipped_engines_are_found_by_kind_with_their_options() -> None:
    assert adapter_for("sim") is SimEngine and adapter_for("vllm") is VllmEngine
    assert engine_options.options_model("sim") is SimOptions
    assert engine_options.options_model("vllm") is VllmOptions
    assert engine_options.engine_kinds() == tuple(sorted(ENGINES)) == ("sim", "vllm")
    with pytest.raises(ValueError, match=r"unknown engine 'tgi'; valid: sim, vllm"):
        adapter_for("tgi")
    with pytest.raises(ValueError, match=r"unknown engine 'tgi'; valid: sim, vllm"):
        engine_options.options_model("tgi")
    # An engine's name is read as its options' key: none may be a field of a spec or space.
    assert not set(ENGINES) & (set(TrialSpec.model_fields) | set(SearchSpace.model_fields))


def test_a_new_adapter_module_is_an_engine_with_its_own_options(
        echo_module: str, tmp_path: Path) -> None:
    echo = sys.modules[echo_module]
    assert adapter_for("echo") is echo.EchoEngine
    assert engine_options.options_model("echo") is echo.EchoOptions
    # Its options, under each spelling; its defaults when none are given.
    spec = TrialSpec.model_validate({**BASE, "engine": "echo", "echo": {"greeting": "hi"}})
    assert spec.options == echo.EchoOptions(greeting="hi")
    assert TrialSpec.model_validate({**BASE, "engine": "echo"}).options == echo.EchoOptions()
    again = TrialSpec.model_validate_json(spec.model_dump_json())
    assert again == spec and isinstance(again.options, echo.EchoOptions)
    # The adapter reads them from the spec it is made for.
    argv = make_engine(spec.model_copy(update={"knobs": {"max_num_seqs": 8}}),
                       tmp_path).argv(1234)
    assert argv[3:] == ["1234", "hi", "1", "--max-num-seqs=8"]
    # Options of other engines are refused, naming whose they are; its own, elsewhere too.
    with pytest.raises(ValidationError, match="sim: options of the simulated engine"):
        TrialSpec.model_validate({**BASE, "engine": "echo", "sim": {"seed": 3}})
    with pytest.raises(ValidationError, match="engine_binary is for engine: vllm"):
        TrialSpec.model_validate({**BASE, "engine": "echo", "engine_binary": "/v"})
    with pytest.raises(ValidationError, match=r"options\.greeting: Extra inputs.*"
                       r"greeting is for engine: echo"):
        TrialSpec.model_validate({**BASE, "options": {"greeting": "hi"}})
    with pytest.raises(ValidationError, match="echo: options of engine echo; this trial's "
                       "engine is sim"):
        TrialSpec.model_validate({**BASE, "echo": {"repeats": 2}})
    # A space of the new engine loads, and makes trial specs with its options.
    space = parse_space({"name": "e", "engine": "echo", "model": "m", "gpu": "b200",
                         "echo": {"repeats": 3},
                         "knobs": {"max_num_seqs": {"type": "values", "values": [8, 16]}}})
    made = space.to_trial_spec(space.defaults(), "t")
    assert made.engine == "echo" and made.options == echo.EchoOptions(repeats=3)
    with pytest.raises(SpaceError, match="not an argument the echo engine takes"):
        parse_space({"name": "e", "engine": "echo", "model": "m", "gpu": "b200",
                     "knobs": {"block_size": {"type": "values", "values": [8, 16]}}})


def test_an_engine_name_is_taken_once() -> None:
    with pytest.raises(TypeError,
                       match=r"engine .sim. is already slotune\.workers\.engines\.sim\.SimEngine"):
        class OtherSim(EngineAdapter):
            kind = "sim"

            def command(self, port: int) -> list[str]:
                return []
    assert adapter_for("sim") is SimEngine

    class TracedSim(SimEngine):  # a variant of an engine, not an engine of its own
        pass
    assert adapter_for("sim") is SimEngine
    with pytest.raises(ValueError, match="is the name of the options field"):
        engine_options.register_options("options", SimOptions)
    with pytest.raises(ValueError, match="lower-case letters"):
        engine_options.register_options("My Engine", SimOptions)
