//! Spilling blocking stages to temporary files when they pass their
//! memory limit (with `allowDiskUse`).
