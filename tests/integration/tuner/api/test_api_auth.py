"""Who may read and write: bearer token on writes, optional read token, writes off without one."""

from __future__ import annotations

import logging

import pytest

from slotune.tuner.api import create_app
from slotune.tuner.db.store import Store
from tests.support.api import ClientFactory, settings_for
from tests.support.api_data import READ_TOKEN, TOKEN, WRITE

BODY = {"budget": {"max_trials": 4}}


@pytest.mark.parametrize("backend", ["postgres", "sqlite"], indirect=True)
async def test_writes_need_the_write_token(make_client: ClientFactory, store: Store) -> None:
    async with make_client() as client:
        missing = await client.post("/api/v1/sweeps", json=BODY)
        assert missing.status_code == 401
        assert missing.headers["www-authenticate"].startswith("Bearer")
        assert "SLOTUNE_API_TOKEN" in missing.json()["detail"]

        wrong = await client.post("/api/v1/sweeps", json=BODY,
                                  headers={"Authorization": "Bearer not-the-token"})
        assert wrong.status_code == 401 and wrong.json()["detail"] == "invalid bearer token"
        basic = await client.post("/api/v1/sweeps", json=BODY,
                                  headers={"Authorization": f"Basic {TOKEN}"})
        assert basic.status_code == 401
        assert store.list_sweeps().count == 0  # nothing was written by the refused calls

        made = await client.post("/api/v1/sweeps", json=BODY, headers=WRITE)
        assert made.status_code == 201, made.text
        assert made.json()["status"] == "queued"
        assert store.get_sweep(made.json()["id"]).budget["max_trials"] == 4

        cancel = await client.post(f"/api/v1/sweeps/{made.json()['id']}/cancel")
        assert cancel.status_code == 401
        assert (await client.get("/api/v1/sweeps")).json()["count"] == 1  # reads are open


async def test_no_token_configured_refuses_every_write(make_client: ClientFactory,
                                                       store: Store) -> None:
    async with make_client(token=None) as client:
        for headers in ({}, WRITE, {"Authorization": "Bearer "}):
            refused = await client.post("/api/v1/sweeps", json=BODY, headers=headers)
            assert refused.status_code == 403
            assert "no API token is configured on the server; set SLOTUNE_API_TOKEN" in \
                refused.json()["detail"]
        assert (await client.get("/api/v1/sweeps")).status_code == 200
    async with make_client(token="   ") as client:  # blank counts as unset, never as ""
        refused = await client.post("/api/v1/sweeps", json=BODY,
                                    headers={"Authorization": "Bearer    "})
        assert refused.status_code == 403
    assert store.list_sweeps().count == 0


async def test_read_token_guards_reads_when_set(make_client: ClientFactory) -> None:
    async with make_client(read_token=READ_TOKEN) as client:
        assert (await client.get("/api/v1/sweeps")).status_code == 401
        wrong = await client.get("/api/v1/workloads", headers={"Authorization": "Bearer x"})
        assert wrong.status_code == 401
        read = {"Authorization": f"Bearer {READ_TOKEN}"}
        assert (await client.get("/api/v1/sweeps", headers=read)).status_code == 200
        assert (await client.get("/api/v1/best", headers=WRITE)).status_code == 200
        capacity = await client.post("/api/v1/capacity",
                                     json={"workload": "w", "target_rps": 1})
        assert capacity.status_code == 401  # a computation over data: a read
        # The read token reads but never writes.
        refused = await client.post("/api/v1/sweeps", json=BODY, headers=read)
        assert refused.status_code == 403 and "read token" in refused.json()["detail"]
        assert (await client.post("/api/v1/sweeps", json=BODY, headers=WRITE)).status_code == 201
        # Health stays open for probes.
        assert (await client.get("/api/v1/health")).json()["status"] == "ok"


async def test_every_write_route_is_guarded_except_capacity(make_client: ClientFactory,
                                                            postgres_url: str) -> None:
    """A write route added later without WriterDep fails here, not in production."""
    paths = create_app(settings_for(postgres_url)).openapi()["paths"]
    writes = [(method.upper(), path) for path, operations in paths.items()
              for method in operations if method not in {"get", "head", "options"}]
    assert ("POST", "/api/v1/sweeps") in writes and ("POST", "/api/v1/capacity") in writes
    async with make_client() as client:
        for method, path in writes:
            if path == "/api/v1/capacity":
                continue
            response = await client.request(method, path.replace("{sweep_id}", "1"), json={})
            assert response.status_code == 401, (method, path, response.text)


async def test_tokens_never_reach_the_logs(make_client: ClientFactory,
                                           caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with make_client(read_token=READ_TOKEN) as client:
        await client.post("/api/v1/sweeps", json=BODY, headers=WRITE)
        await client.post("/api/v1/sweeps", json=BODY, headers={"Authorization": "Bearer guess"})
        await client.get("/api/v1/sweeps", headers={"Authorization": f"Bearer {READ_TOKEN}"})
    assert TOKEN not in caplog.text and READ_TOKEN not in caplog.text
    assert TOKEN not in repr(settings_for("sqlite://"))
