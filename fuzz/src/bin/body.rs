//! AFL++ target: `hitl_ledger_fuzz::targets::body` (see there for what it checks).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        hitl_ledger_fuzz::targets::body(data);
    });
}
