"""The dashboard in headless Chromium: a running job's reward curve grows live, the workers view
shows its leases, Cancel asks for confirmation and ends the job; screenshots of every stage go
to $OPENTINKER_TEST_ARTIFACTS/dashboard/ (default <repo>/test-artifacts/dashboard/)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from opentinker_api.scheduler.v1 import job_pb2
from opentinker.client import OpenTinkerError, SchedulerClient
from harness.stack import LocalStack
from tests.dashboard._browser import artifacts_dir, headless_chromium, require_browser, script_errors
from tests.dashboard._dashboard import DashboardProcess
from tests.dashboard._jobs import create_tenant, tiny_rl_spec

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
WAIT_SECONDS = 60  # generous: a loaded 2-core CI machine can take a while per step
# Long enough to still run when the test cancels it, whatever the machine's speed.
LONG_JOB_STEPS = 2000


@pytest.fixture(scope="package", autouse=True)
def browser_installed() -> None:
    """Checked before the stack starts: no browser fails (or skips) at once."""
    require_browser()


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with headless_chromium() as driver:
        driver.set_page_load_timeout(WAIT_SECONDS)
        yield driver
        assert script_errors(driver) == [], "the page raised script errors"


@pytest.fixture(scope="module")
def screenshot(browser) -> Iterator[object]:  # noqa: ANN001
    folder = artifacts_dir()
    for old in folder.glob("*.png"):
        old.unlink()

    def save(name: str) -> Path:
        path = folder / f"{name}.png"
        assert browser.save_screenshot(str(path)), f"no screenshot {path}"
        assert path.read_bytes()[:8] == PNG_MAGIC
        return path

    yield save


def wait_for(browser, condition, *, timeout: float = WAIT_SECONDS, message: str = ""):  # noqa: ANN001, ANN201
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout, poll_frequency=0.2,
                         ignored_exceptions=(StaleElementReferenceException,)).until(condition, message)


def find(browser, selector: str):  # noqa: ANN001, ANN201 - the first element matching a CSS selector, or None
    from selenium.webdriver.common.by import By

    found = browser.find_elements(By.CSS_SELECTOR, selector)
    return found[0] if found else None


# The page redraws lists, charts and headers as data arrives, so an element found a moment ago may
# be gone: reads happen in one script, clicks retry on a fresh element.
def attribute(browser, selector: str, name: str) -> str | None:  # noqa: ANN001
    script = "const e = document.querySelector(arguments[0]); return e ? e.getAttribute(arguments[1]) : null;"
    return browser.execute_script(script, selector, name)


def text(browser, selector: str) -> str | None:  # noqa: ANN001
    return browser.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : null;",
                                  selector)


def attributes(browser, selector: str, name: str) -> list[str]:  # noqa: ANN001
    script = "return [...document.querySelectorAll(arguments[0])].map((e) => e.getAttribute(arguments[1]));"
    return browser.execute_script(script, selector, name)


def click(browser, selector: str) -> None:  # noqa: ANN001
    def clicked(driver) -> bool:  # noqa: ANN001
        element = find(driver, selector)
        if element is None:
            return False
        element.click()
        return True

    wait_for(browser, clicked, message=f"nothing to click at {selector}")


def page_job_state(browser) -> str | None:  # noqa: ANN001
    return attribute(browser, "#job-state", "data-state")


CHART_POINTS_SCRIPT = """
const chart = document.getElementById("metric-chart");
const line = chart && chart.querySelector("polyline");
const single = chart && chart.querySelector("[data-testid=single-value]");  // one point: shown as its value
const drawn = line ? line.getAttribute("points").trim().split(/\\s+/).length : (single ? 1 : 0);
return chart ? [Number(chart.dataset.points), drawn] : [0, 0];
"""


def chart_points(browser) -> int:  # noqa: ANN001
    """Points of the drawn curve (read in one script: the chart is redrawn as points arrive);
    the chart's data-points must agree with its polyline."""
    declared, drawn = browser.execute_script(CHART_POINTS_SCRIPT)
    assert declared == drawn, f"the chart says {declared} points but draws {drawn}"
    return drawn


def test_a_running_job_updates_live_shows_its_leases_and_cancels_after_confirmation(
        browser, screenshot, dashboard: DashboardProcess, scheduler: SchedulerClient):  # noqa: ANN001
    job_id = scheduler.submit_job(tiny_rl_spec(total_steps=LONG_JOB_STEPS, name="browser-test")).job_id
    try:
        browser.get(dashboard.url + "/")
        row = f'[data-testid="job-row"][data-job-id="{job_id}"]'
        wait_for(browser, lambda b: find(b, f'{row} [data-state="RUNNING"]'), message="job not RUNNING in the list")
        screenshot("01-jobs-list")

        click(browser, f"{row} [data-testid=job-link]")
        wait_for(browser, lambda b: page_job_state(b) == "RUNNING", message="job page not RUNNING")
        # before step 1 only the step-0 eval metrics exist; reward/mean is chosen once it arrives
        wait_for(browser, lambda b: attribute(b, "#metric-chart", "data-metric") == "reward/mean",
                 message="the chart never showed reward/mean")
        first = wait_for(browser, lambda b: chart_points(b) >= 1 and chart_points(b), message="no reward point")
        screenshot("02-job-running")
        grown = wait_for(browser, lambda b: chart_points(b) > first and chart_points(b),
                         message=f"the reward curve stayed at {first} points")
        assert grown > first
        assert int(attribute(browser, "#job-step", "data-step")) >= 1
        screenshot("03-reward-curve-grew")
        # the small panels side by side: reward, loss and the truncated share of an RL step at least
        panels = wait_for(browser, lambda b: {"reward/mean", "loss", "truncated"} <= set(
            attributes(b, "[data-testid=metric-panel]", "data-metric")) and attributes(
            b, "[data-testid=metric-panel]", "data-metric"), message="the metric panels are missing")
        assert len(panels) == len(set(panels)) >= 3
        assert all(int(points) >= 1 for points in attributes(browser, "[data-testid=metric-panel-chart]", "data-points"))
        assert len(browser.find_elements("css selector", "#metric-chart")) == 1  # the panels take no id
        read_the_completions_table(browser, screenshot, scheduler, job_id)

        see_the_job_leases_in_the_workers_view(browser, screenshot, job_id)
        cancel_through_the_confirmation_dialog(browser, screenshot, scheduler, job_id)
    finally:
        cancel_quietly(scheduler, job_id)


def sample_rows(browser) -> list[dict]:  # noqa: ANN001
    """The completions table's rows, read in one script (the table may be re-rendered between calls)."""
    return browser.execute_script(
        "return [...document.querySelectorAll('[data-testid=sample-row]')].map((row) => ({step: row.dataset.step,"
        " split: row.dataset.split, cells: [...row.querySelectorAll(':scope > td')].map((td) => td.innerText)}));")


def read_the_completions_table(browser, screenshot, scheduler: SchedulerClient, job_id: str) -> None:  # noqa: ANN001
    """The latest step's episodes as text, the same as the API's; an earlier step on request."""
    wait_for(browser, lambda b: int(attribute(b, "#job-step", "data-step") or 0) >= 2,
             message="the job never reached step 2")
    # pinned to one step, so the table stays put while the job runs on
    wait_for(browser, lambda b: b.find_elements("css selector", "[data-testid=sample-row][data-split=train]"),
             message="the completions table shows no training episodes")
    browser.execute_script("const s = document.querySelector('#samples-step'); s.value = '2';"
                           "s.dispatchEvent(new Event('change'));")
    wait_for(browser, lambda b: sample_rows(b) and {row["step"] for row in sample_rows(b)} == {"2"},
             message="choosing step 2 did not show step 2")
    rows = [row for row in sample_rows(browser) if row["split"] == "train"]
    expected = next(s for s in scheduler.list_samples(job_id, step=2, split="train"))
    assert len(rows) == len(expected.samples)
    assert rows[0]["cells"][:2] == ["2", "train"]
    assert expected.samples[0].prompt.split("\n")[0][:40] in rows[0]["cells"][2]
    assert rows[0]["cells"][6] in ("correct", "wrong", "–") and rows[0]["cells"][5]  # a verdict and a stop reason
    browser.execute_script("document.querySelector('#samples').scrollIntoView()")
    screenshot("03b-completions")
    browser.execute_script("const s = document.querySelector('#samples-step'); s.value = '1';"
                           "s.dispatchEvent(new Event('change'));")
    wait_for(browser, lambda b: {row["step"] for row in sample_rows(b)} == {"1"},
             message="choosing step 1 did not show step 1")
    browser.execute_script("const s = document.querySelector('#samples-step'); s.value = '';"
                           "s.dispatchEvent(new Event('change'));")
    # the job's artifacts (its metrics so far) with a working download link
    href = wait_for(browser, lambda b: b.execute_script(
        "return document.querySelector('[data-testid=artifact-download]')?.href"), message="no artifact download link")
    assert "/api/artifacts/download?id=" in href
    fetched = browser.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "fetch(arguments[0]).then(async (r) => done([r.status, (await r.text()).split('\\n')[0]]));", href)
    assert fetched[0] == 200 and '"step"' in fetched[1], fetched


def see_the_job_leases_in_the_workers_view(browser, screenshot, job_id: str) -> None:  # noqa: ANN001
    click(browser, "#nav-workers")
    wait_for(browser, lambda b: find(b, f'[data-testid="lease"][data-job-id="{job_id}"]'),
             message="the running job's lease is not in the workers view")
    roles = set(attributes(browser, "[data-testid=worker]", "data-role"))
    assert {"TRAINER", "ROLLOUT", "ENVHOST", "COORDINATOR"} <= roles
    assert find(browser, '[data-role="TRAINER"] [data-testid="device"]') is not None
    screenshot("04-workers-and-leases")
    browser.back()
    wait_for(browser, lambda b: page_job_state(b) == "RUNNING" and chart_points(b) >= 1,
             message="back on the job page, it did not show the running job again")


def cancel_through_the_confirmation_dialog(browser, screenshot, scheduler: SchedulerClient,  # noqa: ANN001
                                           job_id: str) -> None:
    click(browser, "#cancel-button")
    wait_for(browser, lambda b: find(b, "#cancel-dialog").is_displayed(), message="no confirmation dialog")
    screenshot("05-cancel-confirmation")
    click(browser, "#cancel-dismiss")
    wait_for(browser, lambda b: not find(b, "#cancel-dialog").is_displayed())
    assert scheduler.get_job(job_id).state == job_pb2.Job.STATE_RUNNING, "dismissing the dialog cancelled the job"
    assert page_job_state(browser) == "RUNNING"

    click(browser, "#cancel-button")
    wait_for(browser, lambda b: find(b, "#cancel-dialog").is_displayed())
    click(browser, "#cancel-confirm")
    wait_for(browser, lambda b: page_job_state(b) == "CANCELLED", message="the page never showed CANCELLED")
    assert attribute(browser, "#cancel-button", "disabled") is not None
    screenshot("06-job-cancelled")
    assert scheduler.get_job(job_id).state == job_pb2.Job.STATE_CANCELLED

    browser.refresh()  # a finished job's page still shows what happened last
    wait_for(browser, lambda b: page_job_state(b) == "CANCELLED", message="the reloaded page lost the state")
    kinds = wait_for(browser, lambda b: attributes(b, "#event-log li", "data-kind"),
                     message="a finished job's page shows no recent events")
    assert "state_changed" in kinds and "metrics" in kinds, kinds
    assert "CANCELLED" in find(browser, "#event-log").text
    screenshot("07-finished-job-recent-events")
    # the evaluation ran only before step 1 (no final one for a cancelled job): one point, shown as its value
    browser.execute_script("const s = document.querySelector('#metric-select'); s.value = 'eval/reward/mean';"
                           "s.dispatchEvent(new Event('change'));")
    wait_for(browser, lambda b: attribute(b, "#metric-chart", "data-metric") == "eval/reward/mean")
    assert attribute(browser, "#metric-chart", "data-points") == "1"
    assert find(browser, "#metric-chart [data-testid=single-value]") is not None


def test_an_unknown_job_shows_the_404_page(browser, screenshot, dashboard: DashboardProcess):  # noqa: ANN001
    browser.get(dashboard.url + "/jobs/job-does-not-exist")
    wait_for(browser, lambda b: find(b, "[data-testid=not-found]"), message="no 404 page")
    assert "job-does-not-exist" in text(browser, "[data-testid=not-found]")
    screenshot("07-unknown-job-404")


def test_tenants_show_usage_and_a_pasted_tenant_key_sees_the_admin_only_message(
        browser, screenshot, dashboard: DashboardProcess, stack: LocalStack):  # noqa: ANN001
    tenant_id = f"browser-{uuid.uuid4().hex[:8]}"
    created = create_tenant(stack.address("scheduler"), stack.api_key, tenant_id, max_devices=2)
    browser.get(dashboard.url + "/tenants")
    row = f'[data-testid="tenant-row"][data-tenant-id="{tenant_id}"]'
    wait_for(browser, lambda b: find(b, row), message="the new tenant is not listed")
    assert "0 / 2" in text(browser, row)
    screenshot("08-tenants")

    find(browser, "#api-key-input").send_keys(created.api_key_secret)
    click(browser, "#api-key-save")
    wait_for(browser, lambda b: find(b, "[data-testid=tenants-denied]"), message="no admin-only message")
    assert "admin keys only" in text(browser, "[data-testid=tenants-denied]")
    assert browser.execute_script("return localStorage.getItem('opentinker.apiKey')") == created.api_key_secret
    screenshot("09-tenants-with-a-tenant-key")
    click(browser, "#api-key-clear")
    wait_for(browser, lambda b: find(b, row), message="forgetting the key did not bring the admin view back")


def cancel_quietly(scheduler: SchedulerClient, job_id: str) -> None:
    """Leave no job running for the next tests, whatever happened."""
    try:
        scheduler.cancel_job(job_id, reason="browser test cleanup")
    except OpenTinkerError:
        pass  # already ended
