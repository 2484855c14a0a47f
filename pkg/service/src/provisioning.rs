//! provisioning service (being written).
