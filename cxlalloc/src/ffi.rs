//! C API (filled in below).
