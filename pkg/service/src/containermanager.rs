//! containermanager service (being written).
