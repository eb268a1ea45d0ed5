"""The examples run end to end against a server they start from the binary under test."""

from __future__ import annotations

import subprocess
import sys

import pytest
from ledger_support import REPO, ledger_bin


@pytest.mark.parametrize("script", ["refund_graph.py", "wire_transfer_graph.py"])
def test_example_runs_every_scenario(script):
    if not ledger_bin().exists():
        pytest.fail(f"hitl-ledger binary not found at {ledger_bin()}", pytrace=False)
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / script), "--spawn", str(ledger_bin())],
        capture_output=True, text=True, timeout=120,
    )
    out = done.stdout
    assert done.returncode == 0, done.stderr[-3000:]
    sections = {s.split("\n", 1)[0].strip(): s for s in out.split("\n== ")[1:]}
    assert set(sections) == {"approve", "reject", "edit", "timeout", "stale"}, out
    assert "executed=True code=None" in sections["approve"]
    assert "executed=False code=approval_rejected" in sections["reject"]
    assert "executed=True code=None" in sections["edit"]
    assert "refused: conflict" in sections["timeout"] and " timeout " in sections["timeout"]
    assert "executed=False code=approval_expired" in sections["stale"]
    if script == "refund_graph.py":
        assert out.count("REFUND EXECUTED") == 2
        assert "'amount_cents': 2000" in sections["edit"]
    else:
        assert out.count("WIRE SENT") == 2
        assert "24000.00 USD" in sections["edit"]
        assert out.count("account in clear anywhere in the ledger's records: False") == 5
        assert "DE89370400440532013000" not in out
