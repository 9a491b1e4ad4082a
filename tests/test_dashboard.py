"""`otel-safety dashboard` as users run it: a process over a store from real pipeline runs,
driven in headless Debian Chromium through WebDriver (selenium + chromedriver).

Screenshots are read back for the key colours and kept in the test's folder (copied to
$OTEL_SAFETY_SCREENSHOTS when set, to look at). Buttons are clicked for real: a resolution
lands in the store, and an approval reaches a guard waiting for it in this process.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import markupsafe
import pytest
from needs import require
from PIL import Image
from sidecar_support import ServeProcess, self_signed_certificate, wait_for
from test_queries_kit import agent_run, kit_store  # noqa: F401  (the fixture)

from otel_safety import queries
from otel_safety.approvals.halts import HaltStore
from otel_safety.approvals.store import ApprovalStore
from otel_safety.bootstrap import build_engine
from otel_safety.config import Settings
from otel_safety.exporters.duckdb import DuckDBStore, open_store
from otel_safety.guard.guard import Guard
from otel_safety.guard.principals import Directory
from otel_safety.halts import Halt, HaltRegistry
from otel_safety.mapping import trace_id_hex

webdriver = pytest.importorskip("selenium.webdriver")
from selenium.common.exceptions import (  # noqa: E402
    NoSuchElementException,
    StaleElementReferenceException,
)
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as ec  # noqa: E402
from selenium.webdriver.support.ui import Select, WebDriverWait  # noqa: E402

pytestmark = pytest.mark.process  # the dashboard (and serve) run as the commands, processes

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "s3cret-dashboard-token"
PAYLOAD = "<img src=x onerror=\"document.title='pwned'\"><script>document.title='pwned'</script>"
HARD_STOP = (0x7F, 0x1D, 0x1D)
APPROVE_GREEN = (0x15, 0x80, 0x3D)
URL_LINE = re.compile(r"otel-safety (?:dashboard: |serve: dashboard on )(https?://\S+?)/?(?: |$)")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}


class DashboardProcess:
    """`otel-safety dashboard` in a child process on a free port, read from its output."""

    def __init__(self, *args: str) -> None:
        command = [sys.executable, "-m", "otel_safety.cli", "dashboard", "--port", "0", *args]
        self.process = subprocess.Popen(
            command, cwd=ROOT, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )  # fmt: skip
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()
        try:
            wait_for(
                lambda: (
                    any("ready" in line for line in self.lines) or self.process.poll() is not None
                ),
                timeout=60,
                what="the dashboard to start",
            )
            assert self.process.poll() is None, "\n".join(self.lines)
        except BaseException:
            self.stop()
            raise
        self.url = next(m.group(1) for line in self.lines if (m := URL_LINE.search(line)))

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        return self.process.returncode


@pytest.fixture(scope="module")
def store(kit_store, tmp_path_factory):  # noqa: F811
    """The SQL kit's store (an eval sample and scripted runs), copied so actions may write,
    plus one run whose tool call carries HTML as an attacker would send it."""
    source, traces = kit_store
    db = tmp_path_factory.mktemp("dashboard") / "store.duckdb"
    shutil.copy(source, db)
    engine = build_engine(
        Settings.resolve(db_path=str(db), detectors=["scope_escalation"]),
        [DuckDBStore(db, hold=True)],
        background=False,
    )
    spans = agent_run(
        "docs-svc", "<b>docs</b>-assistant", "mallory", "Summarize the README", "run_shell",
        {"command": f"rm -rf build {PAYLOAD}"}, "removed", "Done.", "2024-03-03T10:00:00",
        conversation="conv-html",
    )  # fmt: skip
    engine.process(spans)
    engine.shutdown()
    return db, {**traces, "html": trace_id_hex(spans[0].context.trace_id)}


@pytest.fixture(scope="module")
def dashboard(store):
    db, _ = store
    token_file = db.parent / "token"
    token_file.write_text(TOKEN + "\n")
    server = DashboardProcess(
        "--db", str(db), "--token-file", str(token_file), "--refresh", "1", "--reviewer", "tester"
    )
    yield server
    assert server.stop() == 0, "\n".join(server.lines)


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_path = shutil.which("chromedriver")
    require(chromium is not None, "chromium (Debian package chromium)")
    require(driver_path is not None, "chromedriver (Debian package chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = str(chromium)
    for argument in (
        "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
        "--no-first-run", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--hide-scrollbars", "--window-size=1280,2200",
        f"--user-data-dir={tmp_path_factory.mktemp('profile')}",
    ):  # fmt: skip
        options.add_argument(argument)
    driver = webdriver.Chrome(service=Service(executable_path=str(driver_path)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def wait(driver: Any, timeout: float = 30.0) -> WebDriverWait:
    return WebDriverWait(driver, timeout)


# The panels are replaced by every live refresh, so the page is read in one script each time
# (no element handle to go stale) and a click finds its element afresh until it lands.
def texts(driver: Any, css: str) -> list[str]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), e => e.innerText)", css
    )


def attrs(driver: Any, css: str, name: str) -> list[str | None]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), "
        "e => e.getAttribute(arguments[1]))",
        css,
        name,
    )


def cells(driver: Any, rows_css: str) -> list[list[str]]:
    return driver.execute_script(
        "return Array.from(document.querySelectorAll(arguments[0]), "
        "r => Array.from(r.querySelectorAll('td'), c => c.innerText.trim()))",
        rows_css,
    )


def click(driver: Any, css: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            driver.find_element(By.CSS_SELECTOR, css).click()
            return
        except (StaleElementReferenceException, NoSuchElementException):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def kit(db: Path, name: str, **params: str) -> list[dict[str, Any]]:
    with open_store(db, wait=20) as con:  # the dashboard holds it for moments: wait them out
        columns, rows = queries.run(con, queries.resolve_sql(name), params)
    return [dict(zip(columns, row, strict=True)) for row in rows]


def screenshot(driver: Any, path: Path) -> Image.Image:
    driver.save_screenshot(str(path))
    shots = os.environ.get("OTEL_SAFETY_SCREENSHOTS")
    if shots:
        Path(shots).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(shots) / path.name)
    return Image.open(path).convert("RGB")


def has_colour(image: Image.Image, colour: tuple[int, int, int], at_least: int = 50) -> bool:
    found = sum(
        n
        for n, pixel in image.getcolors(maxcolors=1 << 24) or []
        if all(abs(a - b) <= 8 for a, b in zip(pixel, colour, strict=True))
    )
    return found >= at_least


def open_dashboard(browser: Any, dashboard: DashboardProcess) -> None:
    browser.get(f"{dashboard.url}/?token={TOKEN}")
    wait(browser).until(ec.presence_of_element_located((By.ID, "escalation-chart")))


# --- the HTTP surface ---------------------------------------------------------------------


def test_the_token_is_required_and_a_browser_gets_a_session_cookie(dashboard):
    url = dashboard.url
    refused = httpx.get(f"{url}/")
    assert refused.status_code == 401 and "?token=" in refused.text
    assert httpx.get(f"{url}/", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert httpx.get(f"{url}/panel/flagged?token=wrong").status_code == 401
    page = httpx.get(f"{url}/", headers={"Authorization": f"Bearer {TOKEN}"})
    assert page.status_code == 200 and 'id="flagged-panel"' in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    login = httpx.get(f"{url}/panel/flagged?token={TOKEN}&resolved=1")
    assert login.status_code == 303
    assert login.headers["location"] == "/panel/flagged?resolved=1"  # the token left behind
    cookie = login.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and TOKEN not in cookie
    session = cookie.split(";")[0]
    assert httpx.get(f"{url}/panel/flagged", headers={"Cookie": session}).status_code == 200
    rebound = httpx.get(
        f"{url}/", headers={"Authorization": f"Bearer {TOKEN}", "Host": "evil.test"}
    )
    assert rebound.status_code == 400  # a rebound DNS name is not this dashboard


def test_a_session_expires_and_ends_with_the_run_and_logs_in_only_to_this_dashboard(dashboard):
    """The session was a digest of the token alone: the same for good, across restarts, and
    cookies do not keep to a port. And `//evil.example/x?token=...` sent the browser there."""
    from otel_safety.dashboard.auth import SESSION_SECONDS, session_value

    url = dashboard.url
    login = httpx.get(f"{url}/panel/flagged?token={TOKEN}")
    cookie = login.headers["set-cookie"]
    assert f"Max-Age={SESSION_SECONDS}" in cookie
    session = cookie.split(";")[0]
    assert session.startswith(f"otel_safety_dashboard_{url.rsplit(':', 1)[1]}=")  # its port's
    assert httpx.get(f"{url}/panel/flagged", headers={"Cookie": session}).status_code == 200
    issued = int(session.split("=", 1)[1].split(".")[0])
    stale = session_value(b"another run's secret", issued)
    for forged in (stale, f"{issued - SESSION_SECONDS - 10}.{'0' * 64}", "x.y", ""):
        headers = {"Cookie": f"{session.split('=')[0]}={forged}"}
        assert httpx.get(f"{url}/panel/flagged", headers=headers).status_code == 401
    for path in ("//evil.example/x", "/%5Cevil.example"):
        away = httpx.get(f"{url}{path}?token={TOKEN}")
        assert away.status_code == 303 and away.headers["location"] == "/", path


def test_hostile_requests_get_clear_answers_not_errors(dashboard, store):
    _, traces = store
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    for bad in ("%C2%B2", "abc", "7"):  # '²' was a 500: a digit int() cannot read
        refused = httpx.get(f"{dashboard.url}/panel/flagged?limit={bad}", headers=bearer)
        assert refused.status_code == 400 and "limit must be one of 50, 200, 1000" in refused.text
    for fine in ("", "200"):
        assert httpx.get(f"{dashboard.url}/panel/flagged?limit={fine}", headers=bearer).is_success
    htmx = {**bearer, "HX-Request": "true"}
    target = f"{dashboard.url}/trace/{traces['r3']}/resolve"
    announced = httpx.post(target, content=b"by=x&note=" + b"a" * 200_000, headers=htmx)
    assert "the form is larger than 64 KiB" in announced.text  # by its length, unread

    def chunks():  # no length given: read no further than a form can be
        yield b"by=x&note="
        for _ in range(100):
            yield b"a" * 10_000

    streamed = httpx.post(target, content=chunks(), headers=htmx)
    assert "the form is larger than 64 KiB" in streamed.text


def test_actions_refuse_requests_another_site_could_make(dashboard, store):
    db, traces = store
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    target = f"{dashboard.url}/trace/{traces['r3']}/resolve"
    form = {"by": "mallory", "note": "forged"}
    assert httpx.post(target, data=form, headers=bearer).status_code == 403  # a plain form
    cross = {**bearer, "HX-Request": "true", "Origin": "http://evil.test"}
    assert httpx.post(target, data=form, headers=cross).status_code == 403
    assert httpx.post(f"{dashboard.url}/approvals/safety-1/approve", data=form).status_code == 401
    halt = {**form, "conversation": "conv-1", "reason": "forged"}
    assert httpx.post(f"{dashboard.url}/halts/halt", data=halt, headers=cross).status_code == 403
    with open_store(db, wait=20) as con:
        assert con.execute("SELECT count(*) FROM resolutions").fetchone() == (0,)
        assert con.execute("SELECT count(*) FROM halts").fetchone() == (0,)


def test_a_conversation_halted_on_the_dashboard_stops_a_following_guard_until_lifted(
    dashboard, store
):
    db, _ = store
    htmx = {"Authorization": f"Bearer {TOKEN}", "HX-Request": "true"}
    registry = HaltRegistry()
    guard = Guard(Directory(), halts=registry, halts_from=str(db))
    read = {"path": "notes.txt"}

    def refused() -> bool:
        return guard.check_tool_call("read_file", read, conversation="conv-9", record=False).blocked

    try:
        reasonless = httpx.post(
            f"{dashboard.url}/halts/halt",
            data={"by": "kim", "conversation": "conv-9"},
            headers=htmx,
        )
        assert "say why it is halted" in reasonless.text
        halted = httpx.post(
            f"{dashboard.url}/halts/halt",
            data={"by": "kim", "conversation": "conv-9", "reason": "refunds in a loop"},
            headers=htmx,
        )
        assert halted.status_code == 200 and 'data-conversation="conv-9"' in halted.text
        wait_for(refused, timeout=15, what="the guard to refuse the halted conversation")
        verdict = guard.check_tool_call("read_file", read, conversation="conv-9", record=False)
        assert "refunds in a loop (halted by kim)" in verdict.summary()
        panel = httpx.get(f"{dashboard.url}/panel/halts", headers=htmx).text
        assert "refunds in a loop" in panel and 'id="halts-table"' in panel

        lifted = httpx.post(
            f"{dashboard.url}/halts/lift",
            data={"by": "lee", "conversation": "conv-9"},
            headers=htmx,
        )
        assert 'id="no-halts"' in lifted.text and "lifted" in lifted.text
        wait_for(lambda: not refused(), timeout=15, what="the guard to let it go on")
        again = httpx.post(
            f"{dashboard.url}/halts/lift",
            data={"by": "lee", "conversation": "conv-9"},
            headers=htmx,
        )
        assert "is not halted" in again.text
    finally:
        guard.close()
    with open_store(db, wait=20) as con:
        rows = con.execute("SELECT halted, decided_by FROM halts ORDER BY seq").fetchall()
    assert rows[:2] == [(True, "kim"), (False, "lee")]


def test_a_halt_the_pipeline_stored_names_its_trace_and_links_to_it(dashboard, store):
    from otel_safety.approvals.halt_rows import record_pipeline_halts

    db, traces = store
    halt = Halt(
        conversation="conv-pipe",
        reason="HARD_STOP by tool_guard (0.95): BLOCK run_shell",
        source="trace",
        trace_id=traces["r3"],
    )
    halts = HaltStore(db)
    with halts._transaction() as con:  # as the store's writer records it with the trace
        record_pipeline_halts(con, [halt])
    try:
        htmx = {"Authorization": f"Bearer {TOKEN}", "HX-Request": "true"}
        panel = wait_for(  # a panel read is shared for half a refresh
            lambda: (lambda text: text if "conv-pipe" in text else None)(
                httpx.get(f"{dashboard.url}/panel/halts", headers=htmx).text
            ),
            timeout=10,
            what="the panel to show the pipeline's halt",
        )
        link = f'<a href="/trace/{traces["r3"]}">otel-safety, trace {traces["r3"]}</a>'
        assert 'data-conversation="conv-pipe"' in panel and link in panel
    finally:
        halts.lift("conv-pipe", by="test")


def test_a_trace_page_halts_its_conversation_and_answers_in_one_line(dashboard, store):
    db, traces = store
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    page = httpx.get(f"{dashboard.url}/trace/{traces['html']}", headers=bearer).text
    assert 'id="trace-halt-form"' in page and "conversation <code>conv-html</code>" in page
    form = {"by": "kim", "conversation": "conv-html", "reply": "line"}
    htmx = {**bearer, "HX-Request": "true"}
    reasonless = httpx.post(f"{dashboard.url}/halts/halt", data=form, headers=htmx).text
    assert reasonless.startswith('<p class="error">say why it is halted')
    done = httpx.post(
        f"{dashboard.url}/halts/halt", data={**form, "reason": "deletes builds"}, headers=htmx
    ).text
    assert done.startswith('<p class="key">halted conversation conv-html as kim')
    assert [h.conversation for h in HaltStore(db).in_force()] == ["conv-html"]
    untraced = httpx.get(f"{dashboard.url}/trace/{traces['r3']}", headers=bearer).text
    assert 'id="trace-halt-form"' not in untraced  # no conversation id: nothing to halt


def test_a_halted_conversations_trace_page_says_so_and_lifts_it_in_one_line(dashboard, store):
    """Runs after the test above halted conv-html: its trace page says who halted it and
    why, and offers to lift the halt instead of halting it again."""
    db, traces = store
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    page = wait_for(  # a page read is shared for half a refresh
        lambda: (lambda text: text if 'id="trace-halted"' in text else None)(
            httpx.get(f"{dashboard.url}/trace/{traces['html']}", headers=bearer).text
        ),
        timeout=10,
        what="the trace page to show its conversation halted",
    )
    assert "Its conversation is halted (by kim): deletes builds" in page
    assert 'id="trace-lift-form"' in page and 'id="trace-halt-form"' not in page
    htmx = {**bearer, "HX-Request": "true"}
    form = {"by": "lee", "conversation": "conv-html", "reply": "line"}
    done = httpx.post(f"{dashboard.url}/halts/lift", data=form, headers=htmx).text
    assert done.startswith('<p class="key">lifted the halt of conversation conv-html as lee')
    assert HaltStore(db).in_force() == []


def test_a_resolution_that_cannot_be_recorded_says_why_above_the_form(dashboard, store):
    db, traces = store
    htmx = {"Authorization": f"Bearer {TOKEN}", "HX-Request": "true"}
    target = f"{dashboard.url}/trace/{traces['r3']}/resolve"
    nameless = httpx.post(target, data={"by": " ", "note": "x"}, headers=htmx)
    assert nameless.status_code == 200 and "say who resolves it" in nameless.text
    assert 'id="resolve-form"' in nameless.text  # the form stays to try again
    noteless = httpx.post(target, data={"by": "dana", "note": " "}, headers=htmx)
    assert "a note is required" in noteless.text  # as `otel-safety resolve` requires --note
    wrong = httpx.post(
        target, data={"by": "dana", "note": "x", "detector": "deception"}, headers=htmx
    )
    assert "detector &#39;deception&#39; did not fire on trace" in wrong.text
    huge = httpx.post(target, data={"by": "dana", "note": "x" * 70_000}, headers=htmx)
    assert "the form is larger than 64 KiB" in huge.text  # once "say who resolves it"
    bogus = httpx.post(target, data={"by": "dana", "note": "x", "action": "bogus"}, headers=htmx)
    assert "unknown action &#39;bogus&#39;: resolve or reopen" in bogus.text  # was: resolved
    with open_store(db, wait=20) as con:
        assert con.execute("SELECT count(*) FROM resolutions").fetchone() == (0,)


def test_a_long_note_in_any_script_is_recorded(dashboard, store):
    """A 3,000-character Japanese note (36 KB percent-encoded) was dropped as too large and
    answered "say who resolves it (--by NAME)", in a web page."""
    db, traces = store
    htmx = {"Authorization": f"Bearer {TOKEN}", "HX-Request": "true"}
    target = f"{dashboard.url}/trace/{traces['r4']}/resolve"
    note = "確認済み" * 750
    done = httpx.post(target, data={"by": "kenji", "note": note}, headers=htmx)
    assert done.status_code == 200 and "resolved" in done.text
    with open_store(db, wait=20) as con:
        assert con.execute(
            "SELECT resolution_notes FROM resolutions WHERE trace_id = ?", [traces["r4"]]
        ).fetchone() == (note,)


def test_the_guard_decisions_say_they_are_another_judge_than_the_level(dashboard, store):
    """An ALLOW beside a HARD_STOP run reads as a contradiction unless the page says the
    guard judged each call before it ran, and the detectors the whole run after."""
    db, _ = store
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    with open_store(db, wait=20) as con:
        audited = con.execute("SELECT trace_id FROM audit WHERE trace_id IS NOT NULL").fetchone()
    assert audited is not None
    page = httpx.get(f"{dashboard.url}/trace/{audited[0]}", headers=bearer).text
    assert 'id="trace-audit"' in page and "from the call alone" in page
    assert "<em>trace</em> rows are the same rules read again from the trace" in page
    index = httpx.get(f"{dashboard.url}/", headers=bearer).text
    assert "judgement of whole runs" in index
    assert "<em>trace</em> rows are the same rules read from the trace" in index


def test_the_index_links_its_sections_in_the_order_they_come(dashboard, store):
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    index = httpx.get(f"{dashboard.url}/", headers=bearer).text
    nav = re.search(r"<nav>(.*?)</nav>", index, re.S)
    assert nav is not None
    linked = re.findall(r'href="#([\w-]+)"', nav.group(1))
    sections = re.findall(r'<section id="([\w-]+)"', index)
    assert linked == sections


def test_a_finding_whose_evidence_is_its_explanation_says_it_once(dashboard, store):
    db, _ = store
    with open_store(db, wait=20) as con:
        fired = con.execute(
            "SELECT trace_id, explanation, evidence FROM findings WHERE detected "
            "AND explanation IS NOT NULL ORDER BY trace_id, detector"
        ).fetchall()
    repeated = [
        (trace_id, said)
        for trace_id, said, evidence in fired
        if any(e.get("text") == said for e in json.loads(evidence or "[]"))
    ]
    assert repeated, "the store holds no finding whose evidence repeats its explanation"
    trace_id, said = repeated[0]
    bearer = {"Authorization": f"Bearer {TOKEN}"}
    page = httpx.get(f"{dashboard.url}/trace/{trace_id}", headers=bearer).text
    assert page.count(str(markupsafe.escape(said))) == 1


# --- the pages in the browser -------------------------------------------------------------


@pytest.mark.browser
def test_every_panel_shows_the_store_and_nothing_the_agents_sent_runs(dashboard, store, browser):
    db, traces = store
    open_dashboard(browser, dashboard)
    for table in ("flagged-table", "audit-by-requester", "audit-by-tool", "behaviour-table"):
        wait(browser).until(ec.presence_of_element_located((By.ID, table)))
    shown = attrs(browser, "#flagged-table tbody tr", "data-trace")
    assert shown == [r["trace_id"] for r in kit(db, "flagged_traces", limit_rows="50")]
    Select(browser.find_element(By.ID, "flagged-limit")).select_by_value("1000")
    everything = {r["trace_id"] for r in kit(db, "flagged_traces", limit_rows="1000")}
    assert len(everything) > 50
    wait(browser).until(
        lambda d: set(attrs(d, "#flagged-table tbody tr", "data-trace")) == everything
    )
    assert traces["r1"] in everything and traces["html"] in everything
    assert traces["r2"] not in everything
    assert browser.title == "otel-safety dashboard"  # the payload did not run
    assert not browser.find_elements(By.CSS_SELECTOR, "main img")
    assert any("<b>docs</b>-assistant" in t for t in texts(browser, "#flagged-table td"))
    [still_open] = [t for t in texts(browser, "#totals .total") if "open flagged traces" in t]
    assert int(still_open.split()[0].replace(",", "")) == len(
        kit(db, "flagged_traces", limit_rows="100000")
    )
    mallory = next(c for c in cells(browser, "#audit-by-requester tbody tr") if c[0] == "mallory")
    assert mallory[4] == "2", mallory  # blocked
    behaviour = cells(browser, "#behaviour-table tbody tr")
    assert len(behaviour) == len(kit(db, "behavior_indicators")) > 0
    bars = browser.find_elements(By.CSS_SELECTOR, "#escalation-chart rect.bar.level-HARD_STOP")
    assert bars
    image = screenshot(browser, db.parent / "dashboard.png")
    assert has_colour(image, HARD_STOP), "no HARD_STOP bar or badge on the page"


@pytest.mark.browser
def test_the_audit_panel_filters_by_requester_and_tool(dashboard, store, browser):
    open_dashboard(browser, dashboard)
    wait(browser).until(ec.presence_of_element_located((By.ID, "audit-table")))
    Select(browser.find_element(By.NAME, "requester")).select_by_value("mallory")
    wait(browser).until(
        lambda d: (rows := audit_rows(d)) and {requester for *_, requester in rows} == {"mallory"}
    )
    Select(browser.find_element(By.NAME, "tool")).select_by_value("run_sql")
    wait(browser).until(lambda d: audit_rows(d) == [("BLOCK", "run_sql", "mallory")])
    time.sleep(2.5)  # two live refreshes later the filter still holds
    assert audit_rows(browser) == [("BLOCK", "run_sql", "mallory")]


def audit_rows(driver: Any) -> list[tuple[str, ...]]:
    """(verdict, tool, requester) of each row of the decisions table."""
    return [(c[1], c[3], c[4]) for c in cells(driver, "#audit-table tbody tr") if len(c) > 4]


@pytest.mark.browser
def test_a_trace_shows_its_evidence_and_span_tree_and_resolve_records_who(
    dashboard, store, browser
):
    db, traces = store
    shell = traces["r1"]
    open_dashboard(browser, dashboard)
    Select(browser.find_element(By.ID, "flagged-limit")).select_by_value("1000")
    wait(browser).until(lambda d: attrs(d, f'a[href="/trace/{shell}"]', "href"))
    click(browser, f'#flagged-table a[href="/trace/{shell}"]')
    wait(browser).until(ec.presence_of_element_located((By.ID, "span-table")))
    evidence = browser.find_elements(By.CSS_SELECTOR, "#findings blockquote.evidence")
    assert any("rm -rf build" in e.text for e in evidence)
    rows = browser.find_elements(By.CSS_SELECTOR, "#span-table tbody tr")
    assert [r.find_element(By.TAG_NAME, "td").text.split(" ")[0] for r in rows][:1] == [
        "invoke_agent"
    ]
    flagged = browser.find_elements(By.CSS_SELECTOR, "#span-table tr.flagged")
    assert [r.find_elements(By.TAG_NAME, "td")[2].text for r in flagged] == ["run_shell"]
    root_pad = rows[0].find_element(By.TAG_NAME, "td").value_of_css_property("padding-left")
    child_pad = flagged[0].find_element(By.TAG_NAME, "td").value_of_css_property("padding-left")
    assert float(child_pad.rstrip("px")) > float(root_pad.rstrip("px"))  # drawn as a tree
    assert "open" in browser.find_element(By.ID, "resolution-status").text

    actor = browser.find_element(By.ID, "actor")
    actor.clear()
    actor.send_keys("dana")
    browser.find_element(By.NAME, "note").send_keys("the build folder; expected")
    browser.find_element(By.ID, "resolve-button").click()
    wait(browser).until(
        ec.text_to_be_present_in_element((By.ID, "resolution-status"), "resolved by dana")
    )
    screenshot(browser, db.parent / "trace.png")
    with open_store(db, wait=20) as con:
        stored = con.execute(
            "SELECT detector, resolved, resolved_by, resolution_notes FROM resolutions "
            "WHERE trace_id = ?",
            [shell],
        ).fetchall()
    assert stored == [(None, True, "dana", "the build folder; expected")]

    open_dashboard(browser, dashboard)
    Select(browser.find_element(By.ID, "flagged-limit")).select_by_value("1000")
    wait(browser).until(lambda d: traces["r3"] in attrs(d, "#flagged-table tbody tr", "data-trace"))
    assert shell not in attrs(browser, "#flagged-table tbody tr", "data-trace")
    click(browser, "#show-resolved")
    resolved_row = f'#flagged-table tr.resolved[data-trace="{shell}"]'
    wait(browser).until(lambda d: texts(d, resolved_row))
    assert "resolved by dana" in texts(browser, resolved_row)[0]


@pytest.mark.browser
def test_a_lost_session_is_said_on_the_page_and_the_reviewers_name_follows_the_tab(
    dashboard, store, browser
):
    """After a restart every action got 401, which htmx drops: Approve did nothing visible.
    And the "acting as" name went back to the default on every page."""
    db, traces = store
    target = traces["r3"]
    open_dashboard(browser, dashboard)
    actor = browser.find_element(By.ID, "actor")
    actor.clear()
    actor.send_keys("erin")
    browser.get(f"{dashboard.url}/trace/{target}")
    wait(browser).until(ec.presence_of_element_located((By.ID, "resolve-form")))
    assert browser.find_element(By.ID, "actor").get_attribute("value") == "erin"
    assert not browser.find_element(By.ID, "problem").is_displayed()

    browser.delete_all_cookies()  # as a restart leaves the session: no longer valid
    browser.find_element(By.NAME, "note").send_keys("looked at it")
    browser.find_element(By.ID, "resolve-button").click()
    wait(browser).until(lambda d: d.find_element(By.ID, "problem").is_displayed())
    assert "Not signed in any more" in browser.find_element(By.ID, "problem").text
    with open_store(db, wait=20) as con:
        assert con.execute(
            "SELECT count(*) FROM resolutions WHERE trace_id = ?", [target]
        ).fetchone() == (0,)


def _ask_in_thread(guard: Guard, command: str, results: dict[str, Any]) -> threading.Thread:
    def ask() -> None:
        results[command] = guard.check_tool_call(
            "run_shell", {"command": command}, "alice", record=False, pace=False
        )

    thread = threading.Thread(target=ask, daemon=True)
    thread.start()
    return thread


@pytest.mark.browser
def test_approve_and_deny_reach_the_guard_waiting_for_them(dashboard, store, browser, monkeypatch):
    from otel_safety.guard import approval

    monkeypatch.setattr(approval, "CHANNEL_RECHECK", 0.3)  # a withdrawal reaches it at once
    db, _ = store
    guard = Guard(Directory(), approvals=str(db), approval_timeout=120)
    results: dict[str, Any] = {}
    try:
        approved = _ask_in_thread(guard, "chmod 777 build.sh", results)
        open_dashboard(browser, dashboard)
        pending = "#pending-table tr[data-approval]"
        wait(browser, 60).until(lambda d: attrs(d, pending, "data-approval"))
        [first] = attrs(browser, pending, "data-approval")
        [text] = texts(browser, pending)
        assert "chmod 777 build.sh" in text and "alice" in text
        assert approved.is_alive()  # the guard is still waiting for a person
        image = screenshot(browser, db.parent / "approvals.png")
        assert has_colour(image, APPROVE_GREEN), "no Approve button on the page"
        actor = browser.find_element(By.ID, "actor")  # the header is never replaced
        actor.clear()
        actor.send_keys("lee")
        note = f"note-{first}"
        wait(browser).until(ec.element_to_be_clickable((By.ID, note))).send_keys(
            "build script only"
        )
        time.sleep(2.5)  # two live refreshes of the panel later, the note being typed holds
        typed = browser.execute_script(f"return document.getElementById('{note}').value")
        assert typed == "build script only"
        click(browser, f'tr[data-approval="{first}"] button.approve')
        approved.join(30)
        assert not approved.is_alive(), "the guard did not hear the approval"
        verdict = results["chmod 777 build.sh"]
        assert (verdict.approval, verdict.decision.value) == ("approved", "ALLOW")
        wait(browser).until(ec.presence_of_element_located((By.ID, "decided-table")))

        denied = _ask_in_thread(guard, "chmod 777 deploy.sh", results)
        wait(browser, 60).until(lambda d: any("deploy.sh" in t for t in texts(d, pending)))
        [second] = attrs(browser, pending, "data-approval")
        click(browser, f'tr[data-approval="{second}"] button.deny')
        denied.join(30)
        assert not denied.is_alive(), "the guard did not hear the denial"
        verdict = results["chmod 777 deploy.sh"]
        assert verdict.approval == "denied" and verdict.blocked
        answered = f'#decided-table tr[data-approval="{second}"]'
        wait(browser).until(lambda d: texts(d, answered))
        assert not attrs(browser, pending, "data-approval")  # answered, so no longer pending
        assert "denied" in texts(browser, answered)[0] and "lee" in texts(browser, answered)[0]
        browser.execute_script("document.getElementById('approvals').scrollIntoView()")
        screenshot(browser, db.parent / "approvals-answered.png")
        again = httpx.post(
            f"{dashboard.url}/approvals/{first}/deny",
            data={"by": "someone"},
            headers={"Authorization": f"Bearer {TOKEN}", "HX-Request": "true"},
        )
        assert again.status_code == 200 and f"{first} was already approved by lee" in again.text
        assert ApprovalStore(db).get(second).note is None  # an empty note is no note
        # Denied by mistake: withdrawn, so the guard asks about such a call again.
        click(browser, f'#decided-table tr[data-approval="{second}"] button.withdraw')
        wait(browser).until(lambda d: "withdrawn" in " ".join(texts(d, answered)))
        time.sleep(0.4)  # past the guard's recheck of its answers
        asked_again = _ask_in_thread(guard, "chmod 777 deploy.sh", results)
        wait(browser, 60).until(lambda d: any("deploy.sh" in t for t in texts(d, pending)))
        [third] = attrs(browser, pending, "data-approval")
        assert third != second
        click(browser, f'tr[data-approval="{third}"] button.approve')
        asked_again.join(30)
        assert results["chmod 777 deploy.sh"].approval == "approved"
    finally:
        guard.close()
    with open_store(db, wait=20) as con:
        answers = con.execute(
            "SELECT id, status, decided_by, note FROM approvals WHERE id IN (?, ?) ORDER BY seq",
            [first, second],
        ).fetchall()
    assert answers[0] == (first, "approved", "lee", "build script only")
    assert answers[1][:3] == (second, "withdrawn", "lee")
    assert answers[1][3].startswith("withdrawn: it was denied by lee at 20")  # no note typed


# --- beside serve -------------------------------------------------------------------------


def test_serve_dashboard_shows_what_serve_stores_with_the_same_token(tmp_path):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from sidecar_support import run_agent

    db = tmp_path / "served.duckdb"
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = ("--db", str(db), "--decision-wait", "1", "--token-file", str(token_file),
            "--dashboard", "--dashboard-port", "0", "--workers", "0")  # fmt: skip
    with ServeProcess(*args) as serve:
        url = next(m.group(1) for line in serve.lines if (m := URL_LINE.search(line)))
        assert httpx.get(f"{url}/panel/flagged").status_code == 401
        exporter = OTLPSpanExporter(
            endpoint=f"{serve.http_url}/v1/traces", headers={"Authorization": f"Bearer {TOKEN}"}
        )
        run_agent(exporter, "served-app")
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        page = wait_for(
            lambda: (
                (panel := httpx.get(f"{url}/panel/flagged", headers=bearer, timeout=30)).status_code
                == 200
                and "repo-assistant" in panel.text
                and panel.text
            ),
            timeout=60,
            what="the served trace on the dashboard",
        )
        assert "HARD_STOP" in page
        trace_id = re.search(r'data-trace="([0-9a-f]{32})"', page).group(1)
        resolved = httpx.post(
            f"{url}/trace/{trace_id}/resolve",
            data={"by": "ops", "note": "seen"},
            headers={**bearer, "HX-Request": "true"},
            timeout=30,
        )
        assert resolved.status_code == 200 and "resolved</span> by ops at" in resolved.text
        assert serve.stop() == 0, serve.output
    assert kit(db, "flagged_traces") == []
    assert len(kit(db, "flagged_traces", include_resolved="true")) == 1


def test_serve_with_tls_serves_its_dashboard_over_https(tmp_path):
    """The dashboard beside `serve --tls-cert` spoke plain HTTP, and the token it shares
    with serve travelled in the clear."""
    cert, key = self_signed_certificate(tmp_path)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    args = ("--db", str(tmp_path / "s.duckdb"), "--token-file", str(token_file),
            "--tls-cert", str(cert), "--tls-key", str(key),
            "--dashboard", "--dashboard-port", "0", "--workers", "0")  # fmt: skip
    with ServeProcess(*args) as serve:
        url = next(m.group(1) for line in serve.lines if (m := URL_LINE.search(line)))
        assert url.startswith("https://"), url
        bearer = {"Authorization": f"Bearer {TOKEN}"}
        trusted = ssl.create_default_context(cafile=str(cert))
        page = httpx.get(f"{url}/panel/flagged", headers=bearer, verify=trusted, timeout=30)
        assert page.status_code == 200
        with pytest.raises(httpx.HTTPError):
            httpx.get(url.replace("https://", "http://") + "/panel/flagged", timeout=10)
        assert serve.stop() == 0, serve.output


def test_bidirectional_controls_in_what_agents_wrote_cannot_reorder_a_page():
    """`gnp.exe` behind U+202E read as `exe.png` on the trace page and in the report."""
    from otel_safety.dashboard.app import _templates
    from otel_safety.report.svg import esc

    written = "invoice\u202egnp.exe <b>"
    shown = _templates().from_string("{{ name }}").render(name=written)
    assert shown == "invoice\\u202egnp.exe &lt;b&gt;"
    assert esc(written) == "invoice\\u202egnp.exe &lt;b&gt;"
    assert _templates().from_string("{{ name }}").render(name="line\nbreak") == "line\nbreak"
