"""The report in a real browser (headless Chromium): plots render, the trajectory browser works.

Needs Chromium and its driver (Debian: `apt-get install -y chromium chromium-driver`, which
`.ci/run` does). Under `.ci/run` (REINFORGE_REQUIRE_BROWSER=1) a missing browser fails the test: a
skipped check would let a broken report page pass CI unnoticed. Elsewhere it skips with the reason,
so the README's test command passes on a machine without a browser.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_report import WORST_TRAIN, make_fake_run

from reinforge.telemetry.report import write_report

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
INSTALL_HINT = "run `.ci/run`, or `apt-get install -y chromium chromium-driver` and `pip install -e '.[dev]'`"


def missing(reason: str) -> None:
    """Fail where the browser is required (CI), skip with the reason elsewhere."""
    (pytest.fail if os.environ.get("REINFORGE_REQUIRE_BROWSER") == "1" else pytest.skip)(f"{reason}: {INSTALL_HINT}")


@pytest.fixture
def browser(tmp_path):
    if not (CHROMIUM.exists() and CHROMEDRIVER.exists()):
        missing(f"{CHROMIUM} or {CHROMEDRIVER} is missing")
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        missing("selenium is not installed")
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run", f"--user-data-dir={tmp_path / 'chromium-profile'}", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(str(CHROMEDRIVER)), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def visible_text(driver) -> str:
    views = [v for v in driver.find_elements("css selector", ".view") if v.is_displayed()]
    assert len(views) == 1, f"{len(views)} trajectory views shown at once"
    return views[0].text


def test_report_renders_and_browser_switches_trajectories(browser, tmp_path):
    from selenium.webdriver.support.ui import Select

    report = write_report(make_fake_run(tmp_path))
    browser.get(report.as_uri())

    plots = browser.find_elements("css selector", ".plot svg")
    assert len(plots) == 10
    for svg in plots:
        assert svg.size["width"] > 200 and svg.size["height"] > 100, svg.size
    # nothing fetched: the page is self-contained
    assert browser.execute_script("return performance.getEntriesByType('resource').length") == 0

    # default: the last evaluation step, best trajectories (the held-out one is multi-turn)
    shown = visible_text(browser)
    assert "resp-s4-best" in shown and "tool-obs-42" in shown and "env-says-done" in shown
    tool_turn = next(e for e in browser.find_elements("css selector", ".turn-tool") if e.is_displayed())
    assert tool_turn.value_of_css_property("border-left-color") != "rgba(0, 0, 0, 0)"
    call = next(e for e in browser.find_elements("css selector", ".tool-call") if e.is_displayed())
    assert call.text == "<tool_call>calc 6*7</tool_call>"  # the policy's tool call, marked apart

    browser.find_element("css selector", 'button.pick[data-pick="worst"]').click()
    shown = visible_text(browser)
    assert WORST_TRAIN in shown  # the <script> a model wrote is shown as text, not run
    assert "eval-s4-wrong" in shown and "resp-s4-best" not in shown

    Select(browser.find_element("id", "step-select")).select_by_value("0")
    shown = visible_text(browser)
    assert "resp-s1-a" in shown and "eval-s0-wrong" in shown  # step-1 samples are nearest to eval step 0

    browser.find_element("css selector", 'button.pick[data-pick="best"]').click()
    assert "resp-s1-b" in visible_text(browser) and "eval-s0-right" in visible_text(browser)

    Select(browser.find_element("id", "step-select")).select_by_value("4")  # back to the final policy for the picture
    ARTIFACTS.mkdir(exist_ok=True)
    height = browser.execute_script("return document.documentElement.scrollHeight")
    browser.set_window_size(1400, min(height + 160, 8000))  # + the window's own chrome
    browser.execute_script("window.scrollTo(0, 0)")
    assert browser.save_screenshot(str(ARTIFACTS / "report.png"))
