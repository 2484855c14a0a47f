//! binary service (being written).
