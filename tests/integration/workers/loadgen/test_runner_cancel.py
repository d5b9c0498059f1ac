"""A benchmark that is cancelled mid-run leaves no background task behind."""

from __future__ import annotations

import asyncio
import contextlib

from slotune.workers.contracts import Arrivals, RandomDataset, Workload
from slotune.workers.loadgen.runner import run_benchmark


def test_cancelling_a_run_stops_its_metrics_scraper(stub_url: str) -> None:
    workload = Workload(dataset=RandomDataset(input_len=16, output_len=50),
                        arrivals=Arrivals(request_rate=5.0), num_prompts=50)

    async def cancel_midway() -> list[str]:
        run = asyncio.create_task(run_benchmark(stub_url, "stub", workload))
        await asyncio.sleep(1.5)  # scraping and sending by now
        run.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await run
        # Right away: a leaked scraper is still pending here (it fails a moment later,
        # on its next scrape, against the closed client — "exception never retrieved").
        return [repr(t.get_coro()) for t in asyncio.all_tasks()
                if t is not asyncio.current_task() and not t.done()]

    leftovers = asyncio.run(cancel_midway())
    assert not [t for t in leftovers if "MetricsScraper" in t], leftovers
