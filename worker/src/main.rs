#![deny(unsafe_code)]
fn main() {}
