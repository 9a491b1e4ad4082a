"""Open tabs share the dashboard's store reads: a panel many tabs ask for at once is read from
the store once, and an action made on one page is seen by the next read at once. The app runs
in this process (httpx's ASGI transport), so the store reads can be counted."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from test_queries_kit import agent_run

from otel_safety.bootstrap import build_engine
from otel_safety.config import Settings
from otel_safety.dashboard import data
from otel_safety.dashboard.app import DashboardOptions, create_app
from otel_safety.exporters.duckdb import DuckDBStore
from otel_safety.mapping import trace_id_hex

TABS = 8


@pytest.fixture
def store(tmp_path: Path) -> tuple[Path, str]:
    """A store with one flagged run (a shell call that deletes a tree)."""
    db = tmp_path / "store.duckdb"
    engine = build_engine(
        Settings.resolve(db_path=str(db), detectors=["tool_guard"]),
        [DuckDBStore(db, hold=True)],
        background=False,
    )
    spans = agent_run(
        "docs-svc", "docs-assistant", "alice", "Summarize the README", "run_shell",
        {"command": "rm -rf /"}, "removed", "Done.", "2024-03-01T10:00:00",
    )  # fmt: skip
    engine.process(spans)
    engine.shutdown()
    return db, trace_id_hex(spans[0].context.trace_id)


@pytest.fixture
def reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The store reads the dashboard makes, by what they read."""
    made: list[str] = []
    read = data.read

    def counted(db_path, work, **kwargs):
        made.append(getattr(work, "__name__", "?"))
        return read(db_path, work, **kwargs)

    monkeypatch.setattr(data, "read", counted)
    return made


def _client(db: Path, refresh: float = 60.0) -> httpx.AsyncClient:
    app = create_app(DashboardOptions(db_path=str(db), refresh_seconds=refresh))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1")


def test_tabs_refreshing_at_once_share_one_read_per_panel(store, reads):
    db, trace_id = store

    async def refresh_every_tab() -> list[httpx.Response]:
        async with _client(db) as client:
            panels = ("/panel/escalations", "/panel/flagged")
            return await asyncio.gather(*(client.get(p) for p in panels for _ in range(TABS)))

    answers = asyncio.run(refresh_every_tab())
    assert {a.status_code for a in answers} == {200}
    assert trace_id in answers[-1].text
    assert len(set(a.text for a in answers[:TABS])) == 1
    assert sorted(reads) == ["<lambda>", "escalations"], reads


def test_a_page_answered_a_moment_ago_is_read_again_after_its_freshness(store, reads):
    db, _ = store

    async def twice() -> None:
        async with _client(db, refresh=0.5) as client:
            assert (await client.get("/panel/escalations")).status_code == 200
            await asyncio.sleep(0.3)  # past half the refresh
            assert (await client.get("/panel/escalations")).status_code == 200

    asyncio.run(twice())
    assert reads == ["escalations", "escalations"]


def test_a_resolution_shows_on_the_next_read_not_the_shared_one(store, reads):
    db, trace_id = store
    htmx = {"HX-Request": "true", "Origin": "http://127.0.0.1"}

    async def resolve_between_reads() -> tuple[str, str, str]:
        async with _client(db) as client:
            before = (await client.get("/panel/flagged")).text
            done = await client.post(
                f"/trace/{trace_id}/resolve", data={"by": "dana", "note": "ok"}, headers=htmx
            )
            assert done.status_code == 200, done.text
            after = (await client.get("/panel/flagged")).text
            return before, done.text, after

    before, done, after = asyncio.run(resolve_between_reads())
    assert trace_id in before
    assert "resolved" in done and "dana" in done
    assert trace_id not in after  # the open list, read anew after the action
    assert len(reads) == 3, reads
