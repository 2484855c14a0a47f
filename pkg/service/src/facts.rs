//! facts service (being written).
