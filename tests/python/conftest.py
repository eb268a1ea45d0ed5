"""Fixtures that start the real hitl-ledger server binary in a temporary directory.

The binary is ``$HITL_LEDGER_BIN`` (default ``~/.cache/hitl-ledger/target/debug/hitl-ledger``).
A test module gets one server (``ledger``) whose policy is the module's ``LEDGER_POLICY`` when it
defines one, else :data:`DEFAULT_POLICY`, with the module's ``LEDGER_TOKENS`` (:class:`TokenSpec`)
beside the standard ones; ``make_ledger`` starts extra servers on demand.

``init`` records ``policy.json`` as the ledger's first record (seq 0, a ``policy`` record), and
a server never reads the file again: the test's policy is recorded with ``hitl-ledger policy
set`` before the server starts (seq 1, unless it is the document ``init`` wrote). So the first
records of every test ledger are policy records, which unscoped tokens see on the decision
stream and agent tokens do not.
"""

from __future__ import annotations

import json
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hitl_ledger import LedgerClient

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ledger_support import REPO, ledger_bin  # noqa: E402

sys.path.insert(0, str(REPO / "examples"))

ORIGIN = "hitl-ledger.test/python"

#: Lifetimes long enough for any test, except the tools named for a test of expiry.
DEFAULT_POLICY = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600},
    "tools": {
        "refund_fast": {"approval_ttl_seconds": 1},
        "wire_transfer": {"redact": ["/account"]},
        "send_email": {"mode": "observe"},
    },
}

ROLES = ("agent", "reviewer", "auditor", "admin", "break_glass")

#: The principal of each standard token (``tokens[name]``, ``clients[name]``).
PRINCIPALS = {
    "agent": "py-agent",
    "reviewer": "py-reviewer",
    "auditor": "py-auditor",
    "admin": "py-admin",
    "break_glass": "py-break_glass",
    "reviewer2": "py-reviewer-2",
    "agent2": "py-agent-2",
}


@dataclass
class LedgerServer:
    """One running server: its URL, a token per role, and a client per role."""

    data: Path
    url: str
    proc: subprocess.Popen
    tokens: dict[str, str]
    verifier_key: str
    log: Path
    clients: dict[str, LedgerClient] = field(default_factory=dict)
    extra_args: tuple[str, ...] = ()

    def client(self, role: str, **kw) -> LedgerClient:
        return LedgerClient(self.url, self.tokens[role], **kw)

    @property
    def agent(self) -> LedgerClient:
        return self.clients["agent"]

    @property
    def reviewer(self) -> LedgerClient:
        return self.clients["reviewer"]

    @property
    def auditor(self) -> LedgerClient:
        return self.clients["auditor"]

    @property
    def admin(self) -> LedgerClient:
        return self.clients["admin"]

    @property
    def break_glass(self) -> LedgerClient:
        return self.clients["break_glass"]

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


def _run(binary: Path, data: Path, *args: str) -> str:
    done = subprocess.run(
        [str(binary), "--data", str(data), *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"hitl-ledger {' '.join(args)} exited {done.returncode}: {done.stderr.strip()}"
        )
    return done.stdout


@dataclass(frozen=True)
class TokenSpec:
    """A further token of a test's server: ``name`` (its key in ``tokens`` and ``clients``),
    its principal, role, tenants (``hitl-ledger token add --tenant``, repeated; for an agent
    at most one: its tenant, for another role the tenants it is scoped to) and groups
    (``--group``, repeated: for a tool's ``approvers: ["group:G"]``)."""

    name: str
    principal: str
    role: str
    tenants: tuple[str, ...] = ()
    groups: tuple[str, ...] = ()


def start_server(
    root: Path,
    policy: dict | None = None,
    *,
    extra_args: tuple[str, ...] = (),
    extra_tokens: tuple[TokenSpec, ...] = (),
) -> LedgerServer:
    binary = ledger_bin()
    if not binary.exists():
        pytest.fail(
            f"hitl-ledger binary not found at {binary}: build it or set HITL_LEDGER_BIN",
            pytrace=False,
        )
    data = root / "ledger"
    out = _run(binary, data, "init", "--origin", ORIGIN)
    verifier_key = out.strip().splitlines()[-1] if out.strip() else ""
    tokens = {}
    for role in ROLES:
        answer = json.loads(
            _run(binary, data, "token", "add", "--principal", PRINCIPALS[role], "--role", role,
                 "--format", "json")
        )
        assert answer["principal"] == PRINCIPALS[role] and answer["role"] == role, answer
        tokens[role] = answer["token"]
    # A second reviewer, to show that the ledger records who decided from the token alone.
    answer = json.loads(
        _run(binary, data, "token", "add", "--principal", "py-reviewer-2", "--role", "reviewer",
             "--format", "json")
    )
    tokens["reviewer2"] = answer["token"]
    # A second agent (another host), for what one agent may and may not see of another's.
    answer = json.loads(
        _run(binary, data, "token", "add", "--principal", "py-agent-2", "--role", "agent",
             "--format", "json")
    )
    tokens["agent2"] = answer["token"]
    for spec in extra_tokens:
        tenant_args = [a for t in spec.tenants for a in ("--tenant", t)]
        group_args = [a for g in spec.groups for a in ("--group", g)]
        answer = json.loads(
            _run(binary, data, "token", "add", "--principal", spec.principal, "--role",
                 spec.role, *tenant_args, *group_args, "--format", "json")
        )
        tokens[spec.name] = answer["token"]
    # The test's policy, recorded in the log before the server starts (the server reads no
    # policy file once the log holds a policy record: init wrote one at seq 0).
    policy_file = root / "test-policy.json"
    policy_file.write_text(json.dumps(policy or DEFAULT_POLICY), encoding="utf-8")
    _run(binary, data, "policy", "set", str(policy_file), "--format", "json")
    log = root / "server.log"
    proc, addr = _serve(binary, data, log, "127.0.0.1:0", extra_args)
    server = LedgerServer(
        data=data, url=f"http://{addr}", proc=proc, tokens=tokens,
        verifier_key=verifier_key, log=log, extra_args=extra_args,
    )
    for role in (*ROLES, "reviewer2", "agent2", *(spec.name for spec in extra_tokens)):
        server.clients[role] = server.client(role)
    return server


def _serve(
    binary: Path, data: Path, log: Path, listen: str, extra_args: tuple[str, ...]
) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [str(binary), "--data", str(data), "serve", "--listen", listen, *extra_args],
        stdout=subprocess.PIPE,
        stderr=open(log, "ab"),  # noqa: SIM115 - owned by the child
        text=True,
    )
    line = _first_line(proc, timeout=30)
    if not line.startswith("listening on "):
        proc.kill()
        raise RuntimeError(
            f"server did not announce itself (got {line!r}); log: {log.read_text()[-2000:]}"
        )
    return proc, line.split("listening on ", 1)[1].strip()


def restart_server(server: LedgerServer, *, timeout: float = 10.0) -> None:
    """Stop ``server`` (SIGTERM) and serve the same data directory again on the same address,
    so its clients (and their open event streams) reconnect to it."""
    server.stop()
    addr = server.url.split("://", 1)[1]
    deadline = time.monotonic() + timeout
    while True:
        try:
            server.proc, _ = _serve(ledger_bin(), server.data, server.log, addr,
                                    server.extra_args)
            return
        except RuntimeError:
            if time.monotonic() >= deadline:  # the port stayed taken
                raise
            time.sleep(0.2)


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
def ledger(request, tmp_path_factory):
    policy = getattr(request.module, "LEDGER_POLICY", None)
    tokens = tuple(getattr(request.module, "LEDGER_TOKENS", ()))
    server = start_server(tmp_path_factory.mktemp("ledger"), policy, extra_tokens=tokens)
    yield server
    server.stop()


@pytest.fixture
def make_ledger(tmp_path_factory):
    started: list[LedgerServer] = []

    def make(
        policy: dict | None = None,
        extra_args: tuple[str, ...] = (),
        extra_tokens: tuple[TokenSpec, ...] = (),
    ) -> LedgerServer:
        server = start_server(tmp_path_factory.mktemp("ledger"), policy, extra_args=extra_args,
                              extra_tokens=extra_tokens)
        started.append(server)
        return server

    yield make
    for server in started:
        server.stop()


class Executor:
    """A side effect that only records its calls: the thing that must not happen, observable."""

    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, args: dict, *, idempotency_key: str) -> dict:
        self.calls.append({"args": args, "idempotency_key": idempotency_key})
        return {"operation_id": f"op-{len(self.calls)}", "status": "done"}


@pytest.fixture
def executor() -> Executor:
    return Executor()
