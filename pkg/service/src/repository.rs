//! repository service (being written).
