//! The witness server (protocol section 14.5): the I/O around the pure [`crate::witness`] core.
//!
//! - [`store`]: the witness's data directory (key file, lock, a RocksDB engine through the
//!   [`crate::storage::Engine`] trait) with its configuration, followed logs and per-origin
//!   state in the `witness` keyspace, changed only by a synced compare-and-set;
//! - [`http`]: `POST /add-checkpoint` (C2SP `tlog-witness`), `GET /checkpoint?origin=` for
//!   monitors, `GET /healthz`.
//!
//! Beside `server/` (the ledger's HTTP API), neither importing the other.

pub mod http;
pub mod store;

use std::future::Future;
use std::path::Path;
use std::sync::Arc;

pub use http::{Answer, Witness};
pub use store::WitnessDir;

use crate::clock::SystemClock;
use crate::error::{Error, Result};

/// Opens the witness data directory `dir` and serves it on `listener` with the system clock
/// until `shutdown` resolves (in-flight requests are finished).
///
/// # Errors
/// Those of [`WitnessDir::open`]; I/O errors of the listener.
pub async fn serve(
    dir: &Path,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let dir = dir.to_path_buf();
    let opened = tokio::task::spawn_blocking(move || WitnessDir::open(&dir))
        .await
        .map_err(|e| Error::storage("opening the witness", e))??;
    let witness = Arc::new(Witness::new(opened, Arc::new(SystemClock)));
    serve_witness(
        witness,
        listener,
        crate::serving::ConnectionLimits::default(),
        shutdown,
    )
    .await
}

/// Serves an open witness on `listener` until `shutdown` resolves, within `limits`
/// ([`crate::serving`]).
///
/// # Errors
/// None today (a failed accept is logged and retried); kept for the callers' `?`.
pub async fn serve_witness(
    witness: Arc<Witness>,
    listener: tokio::net::TcpListener,
    limits: crate::serving::ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let gauges = Arc::new(crate::serving::Gauges::default());
    crate::serving::serve(listener, http::router(witness), limits, gauges, shutdown).await;
    Ok(())
}
