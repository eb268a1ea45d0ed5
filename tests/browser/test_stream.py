"""The console's stream reader (console/sse.js) in the browser against the real server: 10,000
records appended while three consumers read, one of them dropping its connection every 500
events; each must see every record once, in seq order (the log's first records, its policy
records, included: the consumers' reviewer token is unscoped)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

from browser_support import wait_for
from selenium.webdriver.common.by import By

N = 10_000
WRITERS = 8


def test_three_consumers_see_every_record_once_in_order(driver, ledger):
    d = driver
    d.get(ledger.url + "/console/")
    wait_for(lambda: d.find_element(By.ID, "token"))
    d.execute_async_script(
        """
        const [tok, done] = arguments;
        import('/console/sse.js').then((m) => {
          window.consumers = [0, 1, 2].map((i) => {
            const c = {seqs: [], hashes: 0, bad: 0, stream: null};
            c.stream = new m.DecisionStream({
              after: null,
              token: () => tok,
              onRecord: async (record, leafHash, seq) => {
                if (record.seq !== seq || typeof leafHash !== 'string') c.bad += 1;
                c.seqs.push(seq);
                if (i === 2 && c.seqs.length % 500 === 0) c.stream.reconnect();
              },
            }).start();
            return c;
          });
          done(true);
        });
        """, ledger.tokens["reviewer"])
    agent = ledger.client("agent")
    # The records before this test's: the policy records every ledger starts with.
    base = int(agent.checkpoint().split("\n")[1])
    assert base >= 1, base
    total = base + N
    errors: list[BaseException] = []

    def write(w: int) -> None:
        try:
            for k in range(w, N, WRITERS):
                agent.append_interrupt(request_id=f"s-{k}", thread_id=f"st-{k % 50}",
                                       interrupt_id=f"i-{k}",
                                       action={"tool": "refund", "args": {"amount_cents": k}})
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    started = time.monotonic()
    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(write, range(WRITERS)))
    assert not errors, errors[0]
    size = int(agent.checkpoint().split("\n")[1])
    assert size == total, size
    wrote = time.monotonic() - started

    def progress():
        return d.execute_script("return window.consumers.map((c) => c.seqs.length)")

    wait_for(lambda: all(n >= total for n in progress()), 180, "every consumer to reach the end",
             interval=1)
    time.sleep(1)  # anything extra would arrive now
    got = d.execute_script(
        """return window.consumers.map((c) => {
             c.stream.stop();
             const s = c.seqs;
             let inOrder = true;
             for (let k = 0; k < s.length; k++) if (s[k] !== k) { inOrder = false; break; }
             return {n: s.length, inOrder, bad: c.bad, connections: c.stream.connections,
                     protocolErrors: c.stream.protocolErrors};
           })""")
    for i, c in enumerate(got):
        assert c["n"] == total and c["inOrder"], f"consumer {i}: {c}"
        assert c["bad"] == 0 and c["protocolErrors"] == 0, f"consumer {i}: {c}"
    assert got[2]["connections"] >= N // 500, got[2]
    assert got[0]["connections"] == 1 and got[1]["connections"] == 1, got
    print(f"{N} records written in {wrote:.1f}s; consumers: {got}")
