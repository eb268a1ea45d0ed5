//! Pure formats: the bytes that are hashed, signed and exported. No I/O, no clock.
//!
//! - [`jcs`]: RFC 8785 canonical JSON and the strict parser;
//! - [`jcs_check`]: the check that bytes already are canonical, building no value tree;
//! - [`canonical`]: a JSON object held as its canonical bytes (an interrupt's arguments);
//! - [`merkle`]: the RFC 6962 tree, proofs and their verification;
//! - [`note`]: C2SP signed notes, checkpoints and thread heads;
//! - [`record`]: the record envelope, kinds and the leaf;
//! - [`body`]: a record's typed body, one struct per kind, and its writer and rules;
//! - [`leaf_reader`]: the typed reader of a stored leaf, building no value tree for the envelope;
//! - [`bundle`]: the export bundle document.

pub mod body;
pub mod bundle;
pub mod canonical;
pub mod jcs;
pub mod jcs_check;
pub mod leaf_reader;
pub mod merkle;
pub mod note;
pub mod record;
pub mod tile;
