//! bootstrap service (being written).
