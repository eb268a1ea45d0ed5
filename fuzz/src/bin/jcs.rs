//! AFL++ target: `hitl_ledger_fuzz::targets::jcs` (see there for what it checks).

fn main() {
    afl::fuzz!(|data: &[u8]| {
        hitl_ledger_fuzz::targets::jcs(data);
    });
}
