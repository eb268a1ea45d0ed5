//! Hands the profile's optimization level to the code, so `hitl-ledger-bench` states in its
//! report how the binaries it measured were built (debug assertions alone do not say).

fn main() {
    let opt = std::env::var("OPT_LEVEL").unwrap_or_else(|_| "unknown".into());
    println!("cargo:rustc-env=HITL_LEDGER_OPT_LEVEL={opt}");
    println!("cargo:rerun-if-changed=build.rs");
}
