//! Generates `include/tandem.h` from the Rust definitions.
//!
//! The C header is never edited by hand: [`c_header`] renders it from the Rust
//! constants and from `offset_of!`/`size_of` of the real structs, and the
//! emitted `_Static_assert`s make a C compiler check that the C declarations
//! land on exactly the offsets Rust uses. The test `c_header_is_current`
//! fails when the committed file differs; regenerate with
//!
//! ```text
//! cargo run -p tandem-proto --example gen_header
//! ```
//!
//! To add a function to the explicit C API, add it to [`EXPLICIT_API`] (in `header/api.rs`).
//!
//! `header/fields.rs` holds the C field tables of the shared-memory structs,
//! `header/render.rs` the rendering.

mod api;
mod fields;
mod render;
#[cfg(test)]
mod tests;

pub use api::EXPLICIT_API;
pub use render::c_header;

/// Path of the generated header, relative to the workspace root.
pub const HEADER_PATH: &str = "include/tandem.h";
