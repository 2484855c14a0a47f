//! Bootstrap data (cloud-config) to a typed, ordered plan. No I/O.
