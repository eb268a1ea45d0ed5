"""Support of the console's real-browser tests: the real server binary and headless Chromium.

(The fixtures are registered by conftest.py; this module has a name of its own so that the
tests can import its helpers whatever other conftest.py a pytest run also loads.)

The server is ``$HITL_LEDGER_BIN`` (default ``~/.cache/hitl-ledger/target/debug/hitl-ledger``),
started in a temporary directory as tests/python/conftest.py does. Its log starts with two
policy records: ``init``'s (seq 0, by ``hitl-ledger``) and the tests' POLICY, recorded with
``hitl-ledger policy set`` before the server starts (seq 1, by the local admin); every other
record comes after them. The browser is Debian's
``chromium`` driven by its ``chromium-driver`` through Selenium (``$HITL_CHROMIUM``,
``$HITL_CHROMEDRIVER`` override the paths). Anything missing fails the tests with a message
saying what to install; nothing is skipped.

Screenshots go to ``$HITL_BROWSER_ARTIFACTS`` (default: an ``artifacts`` folder of pytest's
temporary directory). With ``HITL_UPDATE_SCREENSHOTS=1`` they are also copied to
``docs/console/`` for docs/console.md (by hand, after a change to the console; a test run never
modifies the repository otherwise).
"""

from __future__ import annotations

import base64
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))
sys.path.insert(0, str(REPO / "examples"))

from hitl_ledger import LedgerClient  # noqa: E402

ORIGIN = "hitl-ledger.test/browser"
DEFAULT_BIN = Path.home() / ".cache" / "hitl-ledger" / "target" / "debug" / "hitl-ledger"
DOCS_SHOTS = REPO / "docs" / "console"

#: Long review windows, except where a test opens a request with a short one itself.
POLICY = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600},
    "tools": {"wire_transfer": {"redact": ["/account"]}},
}

ROLES = ("agent", "reviewer", "reviewer2", "auditor", "admin")


def ledger_bin() -> Path:
    return Path(os.environ.get("HITL_LEDGER_BIN") or DEFAULT_BIN)


def _run(binary: Path, data: Path, *args: str) -> str:
    done = subprocess.run([str(binary), "--data", str(data), *args], capture_output=True,
                          text=True, timeout=60)
    if done.returncode != 0:
        raise RuntimeError(f"hitl-ledger {' '.join(args)} exited {done.returncode}: {done.stderr}")
    return done.stdout


@dataclass
class Ledger:
    """One running server: URL, verifier key, a token and a client per role."""

    data: Path
    url: str
    proc: subprocess.Popen
    tokens: dict[str, str]
    verifier_key: str
    log: Path

    def client(self, role: str) -> LedgerClient:
        return LedgerClient(self.url, self.tokens[role])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout:
            self.proc.stdout.close()


def start_ledger(root: Path, extra_tokens: tuple[tuple[str, str, str, tuple[str, ...]], ...] = ()
                 ) -> Ledger:
    """A server in ``root`` with a token per name of ROLES, and one per ``extra_tokens`` entry
    ``(name, principal, role, tenants)`` (``token add --tenant`` for each tenant)."""
    binary = ledger_bin()
    if not binary.is_file():
        pytest.fail(f"hitl-ledger binary not found at {binary}: build it "
                    "(cd /work/main && . scripts/env.sh && cargo build --all-targets) or set "
                    "HITL_LEDGER_BIN", pytrace=False)
    data = root / "ledger"
    _run(binary, data, "init", "--origin", ORIGIN)
    verifier_key = (data / "verifier.key").read_text("utf-8").strip()
    # The policy is part of the log: init recorded its file's; the tests' is recorded on top.
    policy_file = root / "browser-policy.json"
    policy_file.write_text(json.dumps(POLICY), encoding="utf-8")
    _run(binary, data, "policy", "set", str(policy_file))
    tokens = {}
    for name in ROLES:
        role = name.rstrip("2")
        answer = json.loads(_run(binary, data, "token", "add", "--principal", f"web-{name}",
                                 "--role", role, "--format", "json"))
        tokens[name] = answer["token"]
    for name, principal, role, tenants in extra_tokens:
        tenant_args = [a for t in tenants for a in ("--tenant", t)]
        answer = json.loads(_run(binary, data, "token", "add", "--principal", principal,
                                 "--role", role, *tenant_args, "--format", "json"))
        tokens[name] = answer["token"]
    log = root / "server.log"
    proc = subprocess.Popen(
        [str(binary), "--data", str(data), "serve", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE, stderr=open(log, "ab"), text=True,  # noqa: SIM115
    )
    line = _first_line(proc, 30)
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(f"server did not start (got {line!r}): {log.read_text()[-2000:]}")
    url = "http://" + line.split("listening on ", 1)[1].strip()
    return Ledger(data=data, url=url, proc=proc, tokens=tokens, verifier_key=verifier_key, log=log)


def _first_line(proc: subprocess.Popen, timeout: float) -> str:
    assert proc.stdout is not None
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if sel.select(timeout=0.2):
                return proc.stdout.readline()
            if proc.poll() is not None:
                return ""
        return ""
    finally:
        sel.close()


@pytest.fixture(scope="module")
def ledger(tmp_path_factory):
    server = start_ledger(tmp_path_factory.mktemp("ledger"))
    yield server
    server.stop()


@pytest.fixture
def fresh_ledger(tmp_path_factory):
    """A server of its own for one test (the graph tests: a worker replays the whole log)."""
    server = start_ledger(tmp_path_factory.mktemp("ledger"))
    yield server
    server.stop()


# ------------------------------------------------------------------------------ the browser


def _find(env: str, *names: str) -> str | None:
    if os.environ.get(env):
        p = os.environ[env]
        return p if os.path.isfile(p) and os.access(p, os.X_OK) else None
    for n in names:
        p = shutil.which(n)
        if p:
            return p
    return None


@pytest.fixture(scope="session")
def browser_paths() -> tuple[str, str]:
    chromium = _find("HITL_CHROMIUM", "chromium", "chromium-browser")
    driver = _find("HITL_CHROMEDRIVER", "chromedriver")
    missing = []
    if not chromium:
        missing.append("chromium (apt-get install chromium; or set HITL_CHROMIUM)")
    if not driver:
        missing.append("chromedriver (apt-get install chromium-driver; or set HITL_CHROMEDRIVER)")
    if missing:
        pytest.fail("the browser tests need " + " and ".join(missing)
                    + "; scripts/setup.sh installs them", pytrace=False)
    try:
        import selenium  # noqa: F401
    except ImportError:
        pytest.fail("the browser tests need selenium: pip install -r tests/python/requirements.txt",
                    pytrace=False)
    return chromium, driver


def new_driver(browser_paths, width: int = 1280, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    chromium, driver = browser_paths
    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
              f"--window-size={width},{height}", "--no-first-run", "--disable-extensions",
              "--disable-background-networking", "--disable-sync", "--lang=en-US"):
        opts.add_argument(a)
    opts.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})
    d = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    d.set_script_timeout(120)
    d.execute_cdp_cmd("Network.enable", {"maxTotalBufferSize": 100_000_000,
                                         "maxResourceBufferSize": 20_000_000})
    return d


@pytest.fixture
def driver(browser_paths):
    d = new_driver(browser_paths)
    yield d
    d.quit()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory) -> Path:
    d = Path(os.environ.get("HITL_BROWSER_ARTIFACTS") or tmp_path_factory.mktemp("artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    print(f"browser test artifacts in {d}")
    return d


@pytest.fixture
def shoot(driver, artifacts):
    """``shoot(name)``: a screenshot of the page to the artifacts folder (and to docs/console/
    with ``HITL_UPDATE_SCREENSHOTS=1``)."""

    def take(name: str, d=None) -> Path:
        out = artifacts / f"{name}.png"
        (d or driver).save_screenshot(str(out))
        assert out.stat().st_size > 1000, f"screenshot {name} is empty"
        if os.environ.get("HITL_UPDATE_SCREENSHOTS") == "1":
            DOCS_SHOTS.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(out, DOCS_SHOTS / out.name)
        return out

    return take


# ------------------------------------------------------------------------ page helpers


def wait_for(cond, timeout: float = 15.0, what: str = "condition", interval: float = 0.1):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = cond()
        except Exception as e:  # noqa: BLE001 - a stale element is retried until the deadline
            last = e
        else:
            if last:
                return last
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def sign_in(d, ledger: Ledger, role: str = "reviewer") -> None:
    from selenium.webdriver.common.by import By

    d.get(ledger.url + "/console/")
    box = wait_for(lambda: d.find_element(By.ID, "token"), what="the sign-in form")
    box.send_keys(ledger.tokens[role])
    d.find_element(By.CSS_SELECTOR, "#signin-form button[type=submit]").click()
    wait_for(lambda: d.find_element(By.ID, "app").is_displayed(), what="the signed-in console")


def network_log(d) -> list[dict]:
    """Every DevTools network event of the page so far (performance log)."""
    out = []
    for entry in d.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg["method"].startswith("Network."):
            out.append(msg)
    return out


def response_bodies(d, events: list[dict]) -> list[str]:
    """The bodies of the finished responses among ``events`` (streams that are still open are
    read from their received data events instead)."""
    bodies = []
    for ev in events:
        if ev["method"] == "Network.loadingFinished":
            try:
                b = d.execute_cdp_cmd("Network.getResponseBody", {"requestId": ev["params"]["requestId"]})
            except Exception:  # noqa: BLE001 - a body evicted from the buffer or a redirect
                continue
            body = b["body"]
            bodies.append(base64.b64decode(body).decode("utf-8", "replace") if b["base64Encoded"] else body)
        elif ev["method"] == "Network.dataReceived" and ev["params"].get("data"):
            bodies.append(base64.b64decode(ev["params"]["data"]).decode("utf-8", "replace"))
    return bodies


def browser_errors(d) -> list[str]:
    return [e["message"] for e in d.get_log("browser") if e["level"] in ("SEVERE", "WARNING")]


POLICY_THREAD = "hitl-ledger/policy"


def export_with_policy(auditor: LedgerClient, thread: str) -> bytes:
    """The export bundle of ``thread`` with its ``policy`` member (docs/protocol.md 6.1: the
    policy records the thread's records were evaluated under, with a signed thread head of
    hitl-ledger/policy against the same checkpoint). A bundle the ledger wrote with the member
    is returned as it is; one without it (an ``export`` that does not write it yet) gets the
    member from the policy thread's own export, taken against the same checkpoint (the two
    exports are read again when a write came between them)."""
    from urllib.parse import quote

    for _ in range(10):
        _, text = auditor.request("GET", f"/v1/threads/{quote(thread, safe='')}/export", expect_json=False)
        bundle = json.loads(text)
        if "policy" in bundle:
            return text.encode("utf-8")
        _, ptext = auditor.request("GET", f"/v1/threads/{quote(POLICY_THREAD, safe='')}/export",
                                   expect_json=False)
        policy = json.loads(ptext)
        if policy["checkpoint"] == bundle["checkpoint"]:
            bundle["policy"] = {"thread_head": policy["thread_head"], "records": policy["records"]}
            return json.dumps(bundle).encode("utf-8")
    raise AssertionError(f"the exports of {thread!r} and {POLICY_THREAD!r} never shared a checkpoint")
