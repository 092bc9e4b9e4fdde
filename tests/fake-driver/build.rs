//! Link the fake driver as `libcuda.so.1`, bound to its own symbols.
//!
//! `-Bsymbolic`: with the shim `LD_PRELOAD`ed, the fake's calls to its own exported functions
//! (and the addresses `cuGetProcAddress` hands out) must stay inside the fake instead of
//! resolving to the shim's hooks of the same name.

fn main() {
    println!("cargo:rustc-cdylib-link-arg=-Wl,-soname,libcuda.so.1");
    println!("cargo:rustc-cdylib-link-arg=-Wl,-Bsymbolic");
    println!("cargo:rerun-if-changed=build.rs");
}
